"""The arms' advantage wiring: V-trace realigns to the learner, IMPALA re-estimates before every gradient step
and passes once over each batch."""

import importlib

import pytest
import torch

from benchmarks.control import ARMS, make_config, train
from benchmarks.control.arms import ADVANTAGES, AdvantageInputs

train_module = importlib.import_module("benchmarks.control.train")  # the package re-exports the function


def _inputs(learner_shift: float) -> AdvantageInputs:
    g = torch.Generator().manual_seed(0)
    behav = -torch.rand(2, 6, generator=g)
    return AdvantageInputs(behav_logp=behav, learner_logp=behav + learner_shift,
                           rewards=torch.randn(2, 6, generator=g), values=torch.randn(2, 6, generator=g),
                           discounts=torch.full((2, 6), 0.99), bootstrap_value=torch.randn(2, generator=g),
                           mask=torch.ones(2, 6, dtype=torch.bool))


def test_vtrace_estimator_reads_the_learner_logp():
    cfg = make_config("CartPole-v1", gae_lambda=1.0)
    same = _inputs(0.0)
    adv_v, targets_v = ADVANTAGES["vtrace"](same, cfg)
    adv_g, targets_g = ADVANTAGES["gae"](same, cfg)
    torch.testing.assert_close(targets_v, targets_g, rtol=1e-5, atol=1e-5)  # π = μ, λ = 1: V-trace = GAE
    lagged = _inputs(-1.0)  # π/μ = e^-1 everywhere: truncated traces shrink the correction
    adv_l, targets_l = ADVANTAGES["vtrace"](lagged, cfg)
    assert not torch.allclose(targets_l, targets_v)
    torch.testing.assert_close(ADVANTAGES["gae"](lagged, cfg)[1], targets_g)  # GAE ignores π


@pytest.mark.parametrize("arm, calls, steps", [("impala", 4, 4), ("vaco", 1, 12), ("ppo", 1, 12)])
def test_advantage_estimation_count_per_update(monkeypatch, arm, calls, steps):
    """3 epochs × 4 minibatches = 12 gradient steps, except IMPALA: one pass of 4 steps, each on
    advantages estimated with the learner of that moment."""
    pytest.importorskip("gymnasium")  # the `control` extra
    seen, stepped = [], []
    real_estimate, real_step = train_module.estimate, train_module.minibatch_step
    monkeypatch.setattr(train_module, "estimate", lambda *a: seen.append(1) or real_estimate(*a))
    monkeypatch.setattr(train_module, "minibatch_step", lambda *a: stepped.append(1) or real_step(*a))
    train(make_config("CartPole-v1", arm=arm, total_steps=256, num_envs=2, num_steps=128, update_epochs=3,
                      num_minibatches=4))
    assert (len(seen), len(stepped)) == (calls, steps)
    assert ARMS[arm].reestimate == (calls > 1) and ARMS[arm].single_pass == (steps == 4)
