"""configs/gpu-gsm8k.yaml loads and validates (loading only: no GPU, no model, no vLLM)."""

from pathlib import Path

from asyncrl.config import load_config

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "gpu-gsm8k.yaml"


def test_gpu_gsm8k_config_loads(tmp_path):
    model_dir = tmp_path / "Qwen2.5-1.5B-Instruct"
    model_dir.mkdir()
    data = tmp_path / "train.jsonl"
    data.write_text('{"question": "What is 2 + 3?", "answer": "2 + 3 = 5\\n#### 5"}\n')
    cfg = load_config(CONFIG, [f"policy.model_path={model_dir}", f"task.path={data}"])
    assert cfg.policy.device == "cuda" and cfg.policy.gradient_checkpointing
    assert cfg.rollout.engine == "vllm" and cfg.rollout.max_new_tokens == 512
    assert cfg.rollout.vllm_kwargs["dtype"] == "bfloat16" and cfg.rollout.dtype == "bfloat16"
    assert cfg.trainer.autocast == "bfloat16"
    assert cfg.task.name == "gsm8k" and cfg.trainer.lr == 1e-6
    assert cfg.rollout.batch_size % cfg.trainer.n_minibatches == 0


def test_rollout_engine_option():
    import pytest

    from asyncrl.config import ConfigError

    assert load_config().rollout.engine == "transformers"
    assert load_config(overrides=["rollout.engine=vllm"]).rollout.engine == "vllm"
    with pytest.raises(ConfigError, match="rollout.engine"):
        load_config(overrides=["rollout.engine=sglang"])


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
