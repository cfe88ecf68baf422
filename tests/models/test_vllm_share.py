"""vLLM's memory share on CUDA, sized from what the device has free once the worker's staging copy
is there (``torch.cuda.mem_get_info`` monkeypatched) and from the KV cache generation needs. The
staging copies are Qwen2.5-shaped models on the meta device: their sizes are real, no memory is."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from asyncrl.config import Config
from asyncrl.core.loader import ConfigError
from asyncrl.rollout import vllm_memory
from asyncrl.runtime.worker import worker_engine_kwargs

GIB = 2**30
TOTAL = 80 * GIB
SHAPES = {  # Qwen2.5's config.json: hidden, layers, heads, kv heads, MLP, vocabulary, tied, max positions
    "tiny": (64, 2, 4, 2, 128, 256, True, 4096),
    "1.5B": (1536, 28, 12, 2, 8960, 151936, True, 32768),
    "7B": (3584, 28, 28, 4, 18944, 152064, False, 32768),
    "32B": (5120, 64, 40, 8, 27648, 152064, False, 32768),
}


def staging_on_gpu(size: str = "tiny") -> torch.nn.Module:
    hidden, layers, heads, kv, mlp, vocab, tied, positions = SHAPES[size]
    config = Qwen2Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, intermediate_size=mlp, vocab_size=vocab,
                         tie_word_embeddings=tied, max_position_embeddings=positions)
    with torch.device("meta"):
        return Qwen2ForCausalLM(config).to(torch.bfloat16)


def _bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def set_free(monkeypatch, free: int, total: int = TOTAL) -> list:
    asked = []

    def mem_get_info(device=None):
        asked.append(device)
        return free, total

    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    return asked


def plenty_free(monkeypatch) -> None:
    set_free(monkeypatch, TOTAL - GIB)


def _cfg(n_workers=1, backend="local", whole_gpu=False, channel="auto", **engine_kwargs) -> Config:
    cfg = Config()
    cfg.policy.device, cfg.rollout.engine, cfg.rollout.dtype = "cuda", "vllm", "bfloat16"
    cfg.async_.backend, cfg.async_.n_workers, cfg.async_.weight_channel = backend, n_workers, channel
    if whole_gpu:
        cfg.async_.gpus_per_worker = 1.0
    cfg.rollout.engine_kwargs = dict(engine_kwargs)
    return cfg


def test_dedicated_7b_share_leaves_room_for_the_staging_copy_and_the_receive_buffer(monkeypatch):
    """The old 0.9 asked vLLM for 72 GiB of a GPU with 65 GiB free once the staging copy was there."""
    staging = staging_on_gpu("7B")
    weights = _bytes(staging)
    free = TOTAL - weights - GIB // 2  # the staging copy and the worker's CUDA context
    asked = set_free(monkeypatch, free)
    cfg = _cfg(backend="ray", n_workers=2, whole_gpu=True, channel="collective")
    share = worker_engine_kwargs(cfg, staging)["gpu_memory_utilization"]
    assert asked == [torch.device("meta")]  # the staging copy's device
    assert share * TOTAL + weights + vllm_memory.CONTEXT_HEADROOM_BYTES <= free  # + the receive buffer
    assert share * TOTAL >= weights + vllm_memory.MARGIN_BYTES  # vLLM's own weights and more


def test_1_5b_share_is_the_kv_need_not_the_colocated_0_35(monkeypatch):
    """The KV cache of a step's rows × (longest prompt + completion), not 0.35 of the GPU."""
    plenty_free(monkeypatch)
    staging = staging_on_gpu("1.5B")
    cfg = _cfg(n_workers=1)
    cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens = 32, 8, 512
    cfg.task.max_prompt_length = 256
    share = worker_engine_kwargs(cfg, staging)["gpu_memory_utilization"]
    kv = 2 * 28 * 2 * 128 * 2 * 256 * 768  # layers × kv heads × head_dim × bf16 × rows × positions
    assert 256 * 768 > 32768  # more positions than vLLM's one longest sequence
    assert share * TOTAL == pytest.approx(_bytes(staging) + kv + vllm_memory.MARGIN_BYTES)
    old_kv = 0.35 * TOTAL - _bytes(staging) - vllm_memory.MARGIN_BYTES
    assert old_kv > 4 * kv and share < 0.35 / 2  # the old share held over 4× the KV cache needed


def test_max_num_seqs_and_max_model_len_size_the_kv_cache(monkeypatch):
    plenty_free(monkeypatch)
    staging = staging_on_gpu("1.5B")
    share = worker_engine_kwargs(_cfg(max_num_seqs=16, max_model_len=1024), staging)["gpu_memory_utilization"]
    kv = 2 * 28 * 2 * 128 * 2 * 16 * 1024
    assert share * TOTAL == pytest.approx(_bytes(staging) + kv + vllm_memory.MARGIN_BYTES)


def test_a_32b_staging_copy_leaves_no_room_for_vllm_one_line(monkeypatch):
    staging = staging_on_gpu("32B")
    set_free(monkeypatch, TOTAL - _bytes(staging) - GIB // 2)
    with pytest.raises(ConfigError) as err:
        worker_engine_kwargs(_cfg(backend="ray", n_workers=1, whole_gpu=True, channel="collective"), staging)
    message = str(err.value)
    assert "\n" not in message and "rollout.engine_kwargs" in message and "needs at least" in message


def test_colocated_share_refused_when_the_trainer_left_too_little(monkeypatch):
    """Beside the trainer the free memory decides too: 3 GiB free cannot hold a 1.5B engine."""
    set_free(monkeypatch, 3 * GIB)
    with pytest.raises(ConfigError, match="rollout.engine_kwargs: vLLM on meta needs at least"):
        worker_engine_kwargs(_cfg(n_workers=1), staging_on_gpu("1.5B"))


def test_users_memory_setting_is_passed_as_given_with_the_sizes(monkeypatch):
    """The user's share is not computed but vLLM is still told the sequences and lengths: left to
    its defaults its start-up profile (1,024 sequences, a 16k-token pass) would eat that share too.
    A size the user gave wins."""
    asked = set_free(monkeypatch, GIB)  # would be refused if it were computed
    cfg = _cfg(gpu_memory_utilization=0.6)
    positions = cfg.task.max_prompt_length + cfg.rollout.max_new_tokens
    assert worker_engine_kwargs(cfg, staging_on_gpu()) == {
        "gpu_memory_utilization": 0.6, "max_num_seqs": cfg.rollout.batch_size, "max_model_len": positions,
        "max_num_batched_tokens": 4096}
    mine = worker_engine_kwargs(_cfg(kv_cache_memory_bytes=10, max_model_len=300), staging_on_gpu())
    assert (mine["kv_cache_memory_bytes"], mine["max_model_len"], mine["max_num_seqs"]) == (10, 300, 64)
    assert asked == []


def test_sync_mode_engine_is_told_the_sizes_too(monkeypatch):
    """vLLM in the trainer's process (sync mode) gets the same three sizes, beside the user's share."""
    from asyncrl.runtime import engines

    seen = {}
    monkeypatch.setattr(engines, "make_engine", lambda name, spec, **kw: seen.update(kw["engine_kwargs"]))
    monkeypatch.setattr(engines, "enable_tf32", lambda: None)
    cfg = _cfg(gpu_memory_utilization=0.3, max_num_seqs=8)
    cfg.run.mode = "sync"
    engines.rollout_engine(cfg, model=staging_on_gpu("tiny"), tokenizer=None, policy_dir="p", seed=0, chunked=False)
    positions = cfg.task.max_prompt_length + cfg.rollout.max_new_tokens
    assert seen == {"gpu_memory_utilization": 0.3, "max_num_seqs": 8, "max_model_len": positions,
                    "max_num_batched_tokens": 4096}
    cpu = _cfg()
    cpu.policy.device = "cpu"  # off CUDA vLLM's CPU defaults apply (a fixed KV cache): nothing added
    seen.clear()
    engines.rollout_engine(cpu, model=staging_on_gpu("tiny"), tokenizer=None, policy_dir="p", seed=0, chunked=False)
    assert seen == {}


def test_vllm_is_told_the_sequences_and_lengths_its_share_was_sized_for(monkeypatch):
    """Left to its defaults (1,024 sequences, a 16k-token profiling pass) vLLM's start-up profile
    would eat the share's margin: the engine gets max_num_seqs, max_model_len and
    max_num_batched_tokens, the user's own values win, and an episode's length is the prompt plus
    the whole episode budget (a longer context would be refused by vLLM mid-run)."""
    plenty_free(monkeypatch)
    cfg = _cfg()
    kwargs = worker_engine_kwargs(cfg, staging_on_gpu("1.5B"))
    positions = cfg.task.max_prompt_length + cfg.rollout.max_new_tokens
    assert (kwargs["max_num_seqs"], kwargs["max_model_len"]) == (cfg.rollout.batch_size, positions)
    assert kwargs["max_num_batched_tokens"] >= kwargs["max_model_len"]
    mine = worker_engine_kwargs(_cfg(max_num_seqs=8, max_num_batched_tokens=9000), staging_on_gpu("1.5B"))
    assert (mine["max_num_seqs"], mine["max_num_batched_tokens"]) == (8, 9000)
    agent = _cfg()
    agent.env.tools, agent.env.episode_tokens = ["calculator"], 3000
    long_episode = worker_engine_kwargs(agent, staging_on_gpu("1.5B"))["max_model_len"]
    assert long_episode == agent.task.max_prompt_length + 3000
    assert worker_engine_kwargs(agent, staging_on_gpu("tiny"))["max_model_len"] == 4096  # the model's own limit
