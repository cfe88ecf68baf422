# One-command setup + run. Everything lives in .venv; torch is pinned to the CPU build on this path
# (an unpinned torch pulls several GB of CUDA wheels).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: setup demo test test-all clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_PIN)"
	$(BIN)/pip install --quiet -e ".[dev,ray,peers,lora,control]" "$(TORCH_PIN)"
	touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/asyncrl train

test: $(STAMP)
	$(BIN)/python -m pytest -q --durations=25

test-all: $(STAMP)
	$(BIN)/python -m pytest -q -m "not gpu"

clean:
	rm -rf $(VENV) runs .asyncrl_cache
