"""The vLLM engine against a stand-in ``vllm`` that, like vLLM built with ``skip_tokenizer_init``,
never reads stop strings: a turn still ends at its stop string (a tool call's ``</tool_call>``, a
one-token ``<|im_end|>``), with what came after it dropped; requests are never smaller than
``MIN_CHUNK`` tokens; ``rollout.dtype=auto`` generates in bfloat16 with vLLM on CUDA."""

import sys
import types
from dataclasses import dataclass, field

import pytest

from asyncrl.config import load_config
from asyncrl.policy.tokenizer import train_tokenizer
from asyncrl.rollout.base import EngineSpec
from asyncrl.rollout.engine import generation_dtype
from asyncrl.rollout.stop_strings import StopCut
from asyncrl.rollout.vllm_engine import MIN_CHUNK, STOP_CHUNK

CORPUS = ['think <tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call> more words after the call'] * 30


@pytest.fixture(scope="module")
def tokenizer():
    tok = train_tokenizer(CORPUS, 300, split_digits=True)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_end|>"]})
    return tok


@dataclass
class ScriptedLLM:
    """Returns, per request, the next ``max_tokens`` ids of its row's script; honours
    ``stop_token_ids`` (the stop token kept, as vLLM keeps eos) and nothing else: no stop strings."""

    script: list[int]
    requests: list = field(default_factory=list)

    def generate(self, requests, params, use_tqdm=False):
        outs = []
        for request, p in zip(requests, params):
            assert not hasattr(p, "stop") and p.detokenize is False  # there is no tokenizer to do either
            self.requests.append(p.max_tokens)
            done = len(request["prompt_token_ids"]) - 1
            ids = self.script[done:done + p.max_tokens]
            for k, token in enumerate(ids):
                if token in (p.stop_token_ids or ()):
                    ids = ids[:k + 1]
                    break
            logprobs = [{t: types.SimpleNamespace(logprob=-0.5)} for t in ids]
            outs.append(types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids, logprobs=logprobs,
                                                                             finish_reason="length")]))
        return outs

    def reset_prefix_cache(self):
        pass


def _engine(monkeypatch, tokenizer, script, chunk_tokens=None):
    module = types.ModuleType("vllm")
    module.__version__ = "0.20.0"
    module.LLM = lambda **kwargs: ScriptedLLM(script)
    module.SamplingParams = lambda **kwargs: types.SimpleNamespace(**kwargs)
    module.TokensPrompt = lambda **kwargs: dict(kwargs)
    monkeypatch.setitem(sys.modules, "vllm", module)
    from asyncrl.rollout.vllm_engine import VLLMEngine

    spec = EngineSpec(max_new_tokens=200, temperature=1.0, chunk_tokens=chunk_tokens)
    return VLLMEngine("/models/m", tokenizer, spec)


def _ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("chunk_tokens", [None, 8])
def test_a_multi_token_stop_string_ends_the_turn_and_drops_what_follows(monkeypatch, tokenizer, chunk_tokens):
    call = 'think <tool_call>{"name": "add", "arguments": {"a": 2}}</tool_call>'
    script = _ids(tokenizer, call + " more words after the call" * 8)
    engine = _engine(monkeypatch, tokenizer, script, chunk_tokens)
    gen = engine.generate([[1]], stop=["</tool_call>"])
    ids = gen.completion_ids[0][gen.completion_mask[0]].tolist()
    assert tokenizer.decode(ids).endswith("</tool_call>") and ids == script[:len(ids)]  # as sampled, cut
    assert len(gen.behav_logp[0][gen.completion_mask[0]]) == len(ids)
    assert max(engine.llm.requests) <= STOP_CHUNK  # never far past a stop it cannot see


def test_a_one_token_stop_goes_to_vllm_as_a_stop_token(monkeypatch, tokenizer):
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    script = _ids(tokenizer, "think more") + [end] + _ids(tokenizer, " words after")
    cut = StopCut(tokenizer, ["<|im_end|>"])
    assert cut.token_ids == [end] and not cut.multi_token
    engine = _engine(monkeypatch, tokenizer, script)
    gen = engine.generate([[1]], stop=["<|im_end|>"])
    assert gen.completion_ids[0][gen.completion_mask[0]].tolist() == script[:script.index(end) + 1]
    assert engine.llm.requests == [200]  # one request: vLLM stopped at the token itself


def test_without_stops_nothing_is_cut(monkeypatch, tokenizer):
    script = _ids(tokenizer, "think </tool_call> more words") * 20
    gen = _engine(monkeypatch, tokenizer, script).generate([[1]], max_new_tokens=30)
    assert gen.completion_mask[0].sum() == 30


def test_no_negative_stop_token_id_reaches_vllm(monkeypatch, tokenizer):
    """A tokenizer whose eos is -1 ("never stop", as the GPU check's stand-in has) sends no stop id:
    recent vLLM rejects negative ones."""
    engine = _engine(monkeypatch, tokenizer, [5] * 40)
    engine.tokenizer = types.SimpleNamespace(eos_token_id=-1, pad_token_id=0)
    sent = []
    generate = engine.llm.generate
    engine.llm.generate = lambda requests, params, use_tqdm=False: (sent.extend(params), generate(requests, params))[1]
    engine.generate([[1]], max_new_tokens=10)
    assert [p.stop_token_ids for p in sent] == [None]


def test_requests_are_never_smaller_than_the_floor(monkeypatch, tokenizer):
    script = _ids(tokenizer, "more words after the call") * 60
    engine = _engine(monkeypatch, tokenizer, script, chunk_tokens=8)
    hooks = []
    engine.generate([[1]], between_chunks=lambda: hooks.append(1))
    assert engine.llm.requests == [MIN_CHUNK, MIN_CHUNK, MIN_CHUNK, 200 - 3 * MIN_CHUNK]  # not 25 of 8
    assert len(hooks) == 3  # still interruptible between them


@pytest.mark.parametrize("keys, expected", [
    (["rollout.engine=vllm", "policy.device=cuda"], "bfloat16"),  # vLLM in fp32 on a GPU: slow kernels, 2x memory
    (["rollout.engine=vllm", "policy.device=cuda", "rollout.dtype=float32"], "float32"),  # asked for
    (["rollout.engine=vllm", "policy.device=cuda", "policy.dtype=float16"], "float16"),
    (["rollout.engine=vllm"], "float32"),  # CPU
    (["policy.device=cuda"], "float32"),  # the transformers engine generates with the policy's weights
])
def test_auto_generation_dtype(keys, expected, monkeypatch):
    cfg = load_config(None, [])
    for key, value in (k.split("=") for k in keys):
        section, name = key.split(".")
        setattr(getattr(cfg, section), name, value)
    assert generation_dtype(cfg) == expected
