"""The vLLM engine's choices by device, against a stand-in ``vllm`` module (vLLM is not needed, and
no CUDA is touched: a "cuda" spec only selects defaults). What the real engine does with them on a
GPU is checked by the GPU run, not here."""

import sys
import types
from dataclasses import dataclass, field

import pytest
import torch

from asyncrl.config import Config
from asyncrl.rollout.base import EngineSpec
from asyncrl.runtime.worker import engines_beside_trainer, worker_engine_kwargs


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict]
    finish_reason: str = "length"


class _Logprob:
    def __init__(self, value: float):
        self.logprob = value


@dataclass
class FakeLLM:
    """Records its arguments and every call, in order; generates token 5 with log-prob -0.5."""

    kwargs: dict
    calls: list = field(default_factory=list)
    loaded: list = field(default_factory=list)

    def collective_rpc(self, method, kwargs=None):
        self.calls.append(method)
        self.loaded = list(kwargs["weights_iterator"])

    def reset_prefix_cache(self):
        self.calls.append("reset_prefix_cache")

    def sleep(self, level):
        self.calls.append(f"sleep({level})")

    def wake_up(self, tags=None):
        self.calls.append(f"wake_up({','.join(tags)})")

    def generate(self, requests, params, use_tqdm=False):
        self.calls.append("generate")
        return [types.SimpleNamespace(outputs=[_Completion([5] * p.max_tokens,
                                                           [{5: _Logprob(-0.5)}] * p.max_tokens)])
                for p in params]


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = lambda **kwargs: FakeLLM(kwargs)
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    module.TokensPrompt = lambda **kwargs: dict(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return module


def _engine(device: str, **engine_kwargs):
    from asyncrl.rollout.vllm_engine import VLLMEngine

    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    spec = EngineSpec(max_new_tokens=4, temperature=1.0, device=device, dtype="bfloat16")
    return VLLMEngine("/models/m", tokenizer, spec, **engine_kwargs)


def test_cuda_defaults_leave_cuda_graphs_on_and_share_the_gpu(fake_vllm):
    kwargs = _engine("cuda").llm.kwargs
    assert "enforce_eager" not in kwargs  # vLLM's default: CUDA graphs
    assert kwargs["gpu_memory_utilization"] == 0.35
    assert "kv_cache_memory_bytes" not in kwargs
    assert kwargs["logprobs_mode"] == "processed_logprobs" and kwargs["dtype"] == "bfloat16"


@pytest.mark.parametrize("given", [{"gpu_memory_utilization": 0.6}, {"kv_cache_memory_bytes": 2**30},
                                   {"enforce_eager": True, "gpu_memory_utilization": 0.2}])
def test_cuda_user_values_win(fake_vllm, given):
    kwargs = _engine("cuda:1", **given).llm.kwargs
    for key, value in given.items():
        assert kwargs[key] == value
    assert ("gpu_memory_utilization" in kwargs) == ("gpu_memory_utilization" in given)
    assert ("enforce_eager" in kwargs) == ("enforce_eager" in given)


def test_cpu_keeps_eager_and_a_fixed_kv_cache(fake_vllm):
    from asyncrl.rollout.vllm_engine import CPU_KV_CACHE_BYTES

    kwargs = _engine("cpu").llm.kwargs
    assert kwargs["enforce_eager"] is True
    assert kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_BYTES == 512 * 2**20
    assert "gpu_memory_utilization" not in kwargs
    user = _engine("cpu", gpu_memory_utilization=0.1, enforce_eager=False).llm.kwargs
    assert user["gpu_memory_utilization"] == 0.1 and "kv_cache_memory_bytes" not in user
    assert user["enforce_eager"] is False


def test_update_weights_hands_over_the_tensors_themselves(fake_vllm):
    """The loader gets the model's own tensors, on their own device: "meta" tensors here, which any
    copy to the host (``.cpu()``) would refuse."""
    engine = _engine("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3, device="meta"), torch.nn.Linear(3, 2, device="meta"))
    engine.update_weights(model, 7)
    names = [name for name, _ in engine.llm.loaded]
    assert names == list(model.state_dict())
    for (_, given), (_, own) in zip(engine.llm.loaded, model.state_dict().items()):
        assert given.device.type == "meta" and given.shape == own.shape
    cpu_model = torch.nn.Linear(4, 3)
    engine.update_weights(cpu_model, 8)
    assert engine.llm.loaded[0][1].data_ptr() == cpu_model.weight.data_ptr()  # no copy
    assert engine.version == 8 and engine.weight_updates == 2
    assert engine.llm.calls == ["reload_weights", "reset_prefix_cache"] * 2


def test_sleep_mode_sleeps_after_generating_and_wakes_for_weights_then_kv(fake_vllm):
    engine = _engine("cuda", enable_sleep_mode=True)
    assert engine.llm.kwargs["enable_sleep_mode"] is True
    gen = engine.generate([[1, 3], [1]])
    assert gen.completion_ids.tolist() == [[5] * 4] * 2 and torch.all(gen.behav_logp == -0.5)
    assert engine.llm.calls == ["generate", "reset_prefix_cache", "sleep(1)"]
    engine.llm.calls.clear()
    engine.update_weights(torch.nn.Linear(2, 2), 1)  # asleep: the weights wake, the KV cache not yet
    assert engine.llm.calls == ["wake_up(weights)", "reload_weights", "reset_prefix_cache"]
    engine.llm.calls.clear()
    engine.generate([[1]])
    assert engine.llm.calls == ["wake_up(kv_cache)", "generate", "reset_prefix_cache", "sleep(1)"]


def test_without_sleep_mode_the_engine_never_sleeps(fake_vllm):
    engine = _engine("cuda")
    engine.generate([[1]])
    engine.update_weights(torch.nn.Linear(2, 2), 1)
    assert not [c for c in engine.llm.calls if c.startswith(("sleep", "wake_up"))]


def _cfg(device="cuda", engine="vllm", backend="local", n_workers=1, **engine_kwargs) -> Config:
    cfg = Config()
    cfg.policy.device, cfg.rollout.engine, cfg.async_.backend = device, engine, backend
    cfg.async_.n_workers = n_workers
    cfg.rollout.engine_kwargs = dict(engine_kwargs)
    return cfg


def test_worker_memory_share_split_among_the_engines_beside_the_trainer(monkeypatch):
    """With plenty free and a KV need above the cap, the cap decides (tests/models/test_vllm_share.py
    checks the computed share itself)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (79 * 2**30, 80 * 2**30))
    with torch.device("meta"):
        staging = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                               num_key_value_heads=2, intermediate_size=128, vocab_size=256))
    big = {"max_num_seqs": 10**6}  # a KV need far above any cap (in bfloat16, vLLM's default dtype on CUDA)
    assert worker_engine_kwargs(_cfg(n_workers=1, **big), staging)["gpu_memory_utilization"] == 0.35
    assert worker_engine_kwargs(_cfg(n_workers=2, max_model_len=512, **big), staging) == {
        "gpu_memory_utilization": 0.175, "max_model_len": 512, "max_num_batched_tokens": 4096, **big}
    sizes = {"max_num_seqs": 64, "max_model_len": 2096, "max_num_batched_tokens": 4096}  # a step of prompts + completions
    assert worker_engine_kwargs(_cfg(n_workers=2, gpu_memory_utilization=0.5), staging) == {
        "gpu_memory_utilization": 0.5, **sizes}
    assert worker_engine_kwargs(_cfg(n_workers=2, kv_cache_memory_bytes=10), staging) == {
        "kv_cache_memory_bytes": 10, **sizes}
    ray_shared = _cfg(backend="ray", n_workers=3, **big)  # auto: 1/4 GPU each, on the trainer's GPU
    assert engines_beside_trainer(ray_shared) == 3
    assert worker_engine_kwargs(ray_shared, staging)["gpu_memory_utilization"] == pytest.approx(0.35 / 3)
    ray_whole = _cfg(backend="ray", n_workers=2, **big)
    ray_whole.async_.gpus_per_worker = 1.0  # a GPU each: at most vLLM's own default
    assert engines_beside_trainer(ray_whole) == 0
    assert worker_engine_kwargs(ray_whole, staging)["gpu_memory_utilization"] == 0.9


def test_worker_engine_kwargs_unchanged_off_cuda_or_for_other_engines():
    assert worker_engine_kwargs(_cfg(device="cpu")) == {}
    assert worker_engine_kwargs(_cfg(device="cpu", max_model_len=64)) == {"max_model_len": 64}
    assert worker_engine_kwargs(_cfg(engine="transformers")) == {}  # it takes no engine_kwargs
    assert engines_beside_trainer(_cfg(device="cpu", n_workers=2)) == 0
