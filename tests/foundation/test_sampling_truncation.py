"""top-k / top-p sampling (hand-worked distributions) and the behavior log-probs recorded with it."""

import math

import pytest
import torch

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.policy.sampling import sample_token, truncate
from asyncrl.rollout.engine import EngineSpec, make_engine

PROBS = torch.tensor([[0.5, 0.3, 0.15, 0.05]])
LOGITS = PROBS.log()


def _kept(top_p=1.0, top_k=0) -> list[int]:
    return torch.isfinite(truncate(torch.log_softmax(LOGITS, -1), top_p, top_k))[0].nonzero().flatten().tolist()


def test_truncation_keeps_the_hand_worked_sets():
    assert _kept() == [0, 1, 2, 3]
    assert _kept(top_k=2) == [0, 1]
    assert _kept(top_k=1) == [0]
    # nucleus: the smallest most-likely set reaching top_p: 0.5 < 0.7 <= 0.5 + 0.3
    assert _kept(top_p=0.7) == [0, 1]
    assert _kept(top_p=0.9) == [0, 1, 2]  # 0.8 < 0.9 <= 0.95
    assert _kept(top_p=0.3) == [0]  # the most likely token always stays
    # top-k first, then top-p on the renormalized rest: 0.5/0.8 = 0.625 < 0.7
    assert _kept(top_p=0.7, top_k=3) == [0, 1]
    assert _kept(top_p=0.6, top_k=2) == [0]  # 0.625 >= 0.6


def test_top_p_samples_the_renormalized_nucleus_and_records_untruncated_logprobs():
    gen = torch.Generator().manual_seed(0)
    logits = LOGITS.expand(20_000, 4)
    tokens, logps = sample_token(logits, temperature=1.0, top_p=0.7, generator=gen)
    counts = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert counts[2] == 0 and counts[3] == 0
    assert abs(counts[0] - 0.5 / 0.8) < 0.015  # renormalized inside the nucleus
    # behav_logp: the full softmax at T, not the renormalized nucleus
    assert torch.allclose(logps, PROBS[0].log()[tokens], atol=1e-6)
    # at temperature T the log-prob is log_softmax(logits / T) of the sampled token
    tokens, logps = sample_token(logits[:50], temperature=0.5, top_k=2, generator=gen)
    assert torch.allclose(logps, torch.log_softmax(LOGITS / 0.5, -1)[0][tokens], atol=1e-6)


def test_top_k_1_equals_greedy(tiny_policy):
    model, tok, task = tiny_policy
    prompts = [tok(p.prompt)["input_ids"] for p in task.problems("eval")[:4]]

    def generate(temperature, **truncation):
        spec = EngineSpec(max_new_tokens=8, temperature=temperature, seed=3, **truncation)
        return make_engine("transformers", spec, model=model, tokenizer=tok).generate(prompts)

    greedy, top1 = generate(0.0), generate(1.0, top_k=1)
    assert torch.equal(greedy.completion_ids, top1.completion_ids)
    # same tokens; their log-probs are those of the full distribution at T = 1 (not 0 = log 1)
    assert torch.allclose(greedy.behav_logp, top1.behav_logp, atol=1e-5)
    assert (top1.behav_logp[top1.completion_mask] < 0).any()


@pytest.mark.parametrize("override, message", [
    ("rollout.top_p=0", "rollout.top_p: must be in (0, 1]"),
    ("rollout.top_p=1.5", "rollout.top_p: must be in (0, 1]"),
    ("rollout.top_k=-1", "rollout.top_k: must be >= 0"),
    ("eval.top_p=0", "eval.top_p: must be in (0, 1]"),
])
def test_bad_truncation_settings(override, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("]", r"\]")):
        load_config(None, [override])


def test_defaults_are_off():
    cfg = load_config(None, [])
    assert (cfg.rollout.top_p, cfg.rollout.top_k, cfg.eval.top_p, cfg.eval.top_k) == (1.0, 0, 1.0, 0)
    assert math.isclose(load_config(None, ["rollout.top_p=0.9"]).rollout.top_p, 0.9)
