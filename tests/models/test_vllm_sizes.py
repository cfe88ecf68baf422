"""vLLM started at the sizes a rollout worker's share is built for (``worker_engine_kwargs``): they
reach vLLM's config and it starts with its KV cache; a chunk or an episode that reaches
``max_model_len`` ends there, and the engine serves on; on CUDA the memory share sized by
``rollout/vllm_memory.py`` (``ASYNCRL_VLLM_DEVICE=cuda``). Slow, in the vLLM lane with
tests/models/test_vllm_engine.py."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: ~5 s start-up
pytest.importorskip("vllm")

from .vllm_lane import DEVICE, TEMPERATURE, TOL, problem_prompts, tiny_dir, trainer_logp  # noqa: E402, F401 (a fixture)


# a rollout worker's engine on CUDA, in a process of its own as a worker's is: the share that
# worker_engine_kwargs sizes (rollout/vllm_memory.py), what vLLM then takes, its KV cache's tokens
SHARE_CASE = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from asyncrl.config import Config
from asyncrl.rollout import EngineSpec
from asyncrl.rollout.vllm_engine import VLLMEngine
from asyncrl.runtime.worker import engine_sequences, worker_engine_kwargs

path = sys.argv[1]
cfg = Config()
cfg.policy.device, cfg.rollout.engine, cfg.rollout.dtype = "cuda", "vllm", "bfloat16"
cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens = 4, 4, 32
cfg.task.max_prompt_length = 64
staging = AutoModelForCausalLM.from_pretrained(path).to("cuda", torch.bfloat16)  # the staging copy
kwargs = worker_engine_kwargs(cfg, staging)
free, total = torch.cuda.mem_get_info()
engine = VLLMEngine(path, AutoTokenizer.from_pretrained(path),
                    EngineSpec(max_new_tokens=32, temperature=1.0, device="cuda", dtype="bfloat16"), **kwargs)
after, _ = torch.cuda.mem_get_info()
gen = engine.generate([[5, 6, 7]] * 16)
cache = getattr(getattr(engine.llm.llm_engine, "vllm_config", None), "cache_config", None)
blocks = getattr(cache, "num_gpu_blocks", None)
seqs, positions = engine_sequences(cfg)
print(json.dumps({"kwargs": kwargs, "free": free, "total": total, "taken": free - after, "seqs": seqs,
                  "positions": positions, "kv_tokens": blocks * cache.block_size if blocks else None,
                  "generated": int(gen.completion_mask.sum())}))
"""


@pytest.mark.skipif(DEVICE != "cuda", reason="vLLM's memory share is sized on CUDA only (ASYNCRL_VLLM_DEVICE=cuda)")
def test_memory_share_is_the_one_vllm_memory_sized(tiny_dir):
    """vLLM starts in the share sized from the free memory and generation's need, takes no more of
    the GPU than that share and the headroom kept outside it (CUDA graphs, allocator), and its KV
    cache holds every sequence of a step at its longest."""
    from asyncrl.rollout import vllm_memory

    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", SHARE_CASE, str(tiny_dir[0])], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(row)  # the numbers, in the GPU check's log
    share = row["kwargs"]["gpu_memory_utilization"]
    assert row["kwargs"]["max_num_seqs"] == row["seqs"] and row["kwargs"]["max_model_len"] == row["positions"]
    assert 0 < share <= 0.35  # beside the trainer: at most the colocated share
    assert row["taken"] <= share * row["total"] + vllm_memory.CONTEXT_HEADROOM_BYTES
    assert row["kv_tokens"] is not None, "vLLM's cache_config.num_gpu_blocks was not found"
    assert row["kv_tokens"] >= row["seqs"] * row["positions"]
    assert row["generated"] > 0


@pytest.fixture(scope="module")
def sized(tiny_dir):
    """An engine given what a rollout worker's share is sized for (worker_engine_kwargs on a
    stand-in 80 GB GPU): max_num_seqs = a step's rows, max_model_len = prompt + new tokens,
    max_num_batched_tokens; on the CPU the share's KV bytes as kv_cache_memory_bytes."""
    from asyncrl.config import Config
    from asyncrl.rollout import EngineSpec, vllm_memory
    from asyncrl.rollout.vllm_engine import VLLMEngine
    from asyncrl.runtime.worker import worker_engine_kwargs

    path, model, tokenizer, _ = tiny_dir
    cfg = Config()
    cfg.policy.device, cfg.rollout.engine = "cuda", "vllm"
    cfg.task.max_prompt_length, cfg.rollout.max_new_tokens = 64, 32
    cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt = 2, 4
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(torch.cuda, "mem_get_info", lambda device=None: (79 * 2**30, 80 * 2**30))
        kwargs = worker_engine_kwargs(cfg, model)
    assert kwargs.pop("gpu_memory_utilization") > 0
    shape = vllm_memory.kv_shape(model.config, "float32")
    need = vllm_memory.need(shape, 0, kwargs["max_num_seqs"], kwargs["max_model_len"], kwargs["max_model_len"])
    kwargs["kv_cache_memory_bytes"] = need.kv
    engine = VLLMEngine(path, tokenizer, EngineSpec(max_new_tokens=32, temperature=TEMPERATURE, seed=0), **kwargs)
    return engine, kwargs, need


def test_a_sized_share_reaches_vllm_and_it_starts_with_its_kv_cache(sized):
    engine, kwargs, need = sized
    assert (kwargs["max_num_seqs"], kwargs["max_model_len"]) == (8, 96)
    config = engine.llm.llm_engine.vllm_config
    assert config.scheduler_config.max_num_seqs == kwargs["max_num_seqs"]
    assert config.scheduler_config.max_num_batched_tokens == kwargs["max_num_batched_tokens"]
    assert config.model_config.max_model_len == kwargs["max_model_len"] == engine.max_model_len
    cache = config.cache_config
    assert cache.num_gpu_blocks and cache.num_gpu_blocks > 0
    # vLLM's KV bytes per token are the share's: the cache holds the sized sequences, not fewer
    assert cache.num_gpu_blocks * cache.block_size >= need.seqs * need.positions


def test_a_chunk_that_ends_at_max_model_len_ends_the_row(sized, tiny_dir):
    """32 prompt ids + one 64-token chunk = the 96-position window: the row is done there (the
    next request would have a prompt as long as the window, which vLLM refuses)."""
    engine, _, _ = sized
    _, model, tokenizer, _ = tiny_dir
    engine.update_weights(model, 0)
    g = torch.Generator().manual_seed(6)
    prompts = [torch.randint(3, tokenizer.vocab_size, (32,), generator=g).tolist() for _ in range(8)]
    engine.chunk_tokens = 64
    try:
        gen = engine.generate(prompts, max_new_tokens=200)
    finally:
        engine.chunk_tokens = None
    lengths = gen.completion_mask.sum(1).tolist()
    assert max(lengths) == 96 - 32 and all(n <= 64 for n in lengths), lengths
    torch.testing.assert_close(gen.behav_logp, trainer_logp(model, gen), atol=TOL, rtol=0)


def test_an_episode_that_reaches_max_model_len_ends_cleanly(sized, tiny_dir):
    """Endless turns with a budget (env.episode_tokens) far past the 96-position window: every
    episode ends as max_model_len, none past it, the engine serves on; the trainer's log-probs of
    the rows equal vLLM's."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
    from asyncrl.agents.render import PlainTurns

    engine, _, _ = sized
    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)

    class Endless:
        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            return "go on", 0.0, False, {}

    runner = EpisodeRunner(Endless, PlainTurns(tokenizer), tokenizer,
                           EpisodeLimits(max_turns=100, turn_tokens=24, episode_tokens=4000),
                           scheduling=Scheduling(schedule="rounds"))
    episodes = runner.run(engine, task.problems("train")[:2], 2)
    assert {e.end for e in episodes} <= {"max_model_len"} and len(episodes) == 4
    assert all(len(e.context_ids) <= 96 and e.turns > 1 for e in episodes)
    gen = episodes_to_generation(episodes, tokenizer.pad_token_id)
    assert (trainer_logp(model.eval(), gen) - gen.behav_logp)[gen.completion_mask].abs().max() < TOL
    assert engine.generate(problem_prompts(tokenizer, task.problems("train")[:2], 1)).completion_mask.any()
