"""The gpu-gsm8k preset loads and validates (loading only: no GPU, no model, no vLLM)."""

from pathlib import Path

from asyncrl.runtime.validate import load_run_config
from asyncrl.config.presets import PRESETS_DIR

CONFIG = PRESETS_DIR / "gpu-gsm8k.yaml"


def test_gpu_gsm8k_config_loads(tmp_path):
    model_dir = tmp_path / "Qwen2.5-1.5B-Instruct"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")  # load_config checks that it is a model directory
    (model_dir / "tokenizer.json").write_text("{}")  # ... with tokenizer files
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\\n#### 5"}\n')
    cfg = load_run_config(CONFIG, [f"policy.model_path={model_dir}", f"task.path={data}"])
    assert cfg.policy.device == "cuda" and cfg.policy.gradient_checkpointing
    assert cfg.rollout.engine == "vllm" and cfg.rollout.max_new_tokens == 512
    # generation's dtype is rollout.dtype (the staging copy and the KV sizing follow it); no fixed
    # memory share, so the worker sizes vLLM's from its KV need
    assert cfg.rollout.dtype == "bfloat16" and cfg.rollout.engine_kwargs == {"max_model_len": 1024}
    assert cfg.trainer.autocast == "bfloat16"
    assert cfg.task.name == "gsm8k" and cfg.trainer.lr == 1e-6
    assert cfg.rollout.batch_size % cfg.trainer.n_minibatches == 0


def test_rollout_engine_option():
    import pytest

    from asyncrl.config import ConfigError

    assert load_run_config().rollout.engine == "transformers"
    assert load_run_config(overrides=["rollout.engine=vllm"]).rollout.engine == "vllm"
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_run_config(overrides=["rollout.engine=sglang"])


def test_missing_vllm_is_one_line_config_error(monkeypatch, tiny_policy):
    import sys

    import pytest

    from asyncrl.config import ConfigError
    from asyncrl.rollout import EngineSpec
    from asyncrl.rollout.vllm_engine import VLLMEngine

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm → ImportError
    _, tokenizer, _ = tiny_policy
    with pytest.raises(ConfigError, match=r"rollout.engine: vllm is not installed") as err:
        VLLMEngine("/nonexistent", tokenizer, EngineSpec(max_new_tokens=4, temperature=1.0))
    assert "\n" not in str(err.value)


EMBEDDED_GPU = PRESETS_DIR / "gpu-embedded.yaml"


def test_gpu_embedded_preset_loads_with_mixed_precision():
    cfg = load_run_config(EMBEDDED_GPU)
    assert cfg.policy.device == "cuda" and cfg.policy.dtype == "float32"
    assert cfg.trainer.autocast == "bfloat16" and cfg.rollout.dtype == "bfloat16"
    assert (cfg.model.hidden_size, cfg.model.num_layers, cfg.model.num_kv_heads) == (896, 24, 2)


def test_cuda_device_without_gpu_is_one_line_error(tmp_path):
    """On a machine without CUDA a GPU config still loads, and a run says why it cannot start."""
    import os
    import subprocess
    import sys

    import pytest
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "policy.device=cuda", "run.progress=false"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("asyncrl: ") and "policy.device:" in proc.stderr
    assert "\n" not in proc.stderr.strip()
    assert not (tmp_path / "runs").exists()  # nothing half-written
