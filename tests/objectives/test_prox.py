"""approximate_prox_logp (A-3PO and friends, docs/objectives.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.objectives import (
    PROX_STRATEGIES,
    apply_loglinear,
    approximate_prox_logp,
    loglinear_plan,
    policy_loss,
    staleness_alpha,
    staleness_stats,
)

from .helpers import t

FAST = settings(max_examples=60, deadline=None)


def test_loglinear_hand_case():
    # V = 5; versions [5, 4, 3, 1, -1, 7] -> d = [0, 1, 2, 4, prompt, -2] -> α = [1, 1, 1/2, 1/4, 1, 1]
    versions = torch.tensor([[5, 4, 3, 1, -1, 7]])
    behav = torch.full((1, 6), -1.0)
    logp = torch.full((1, 6), -3.0, requires_grad=True)
    prox = approximate_prox_logp("loglinear", behav, logp, versions, 5)
    torch.testing.assert_close(prox, t([[-1.0, -1.0, -2.0, -2.5, -1.0, -1.0]]))
    assert prox.dtype == torch.float32 and not prox.requires_grad
    torch.testing.assert_close(staleness_alpha(versions, 5), t([[1.0, 1.0, 0.5, 0.25, 1.0, 1.0]]))


def test_linear_and_behav_hand_cases():
    versions = torch.tensor([[3, 1]])  # V = 3: α = [1, 1/2]
    behav = t([[-1.0, -1.0]])
    logp = t([[-3.0, -3.0]])
    lin = approximate_prox_logp("linear", behav, logp, versions, 3)
    torch.testing.assert_close(lin, t([[-1.0, math.log(0.5 * math.exp(-1) + 0.5 * math.exp(-3))]]))
    beh = approximate_prox_logp("behav", behav.to(torch.bfloat16), logp, versions, 3)
    assert beh.dtype == torch.float32
    torch.testing.assert_close(beh, behav)


def test_non_finite_current_logp():
    versions = torch.tensor([[2, 0]])  # V = 2: α = [1, 1/2]
    behav = t([[-1.0, -1.0]])
    logp = t([[float("nan"), float("-inf")]])
    # the probability mixture selects ℓ_b where α = 1 (the NaN never read) and is exactly log(½ p_b)
    # where p_θ = 0
    lin = approximate_prox_logp("linear", behav, logp, versions, 2)
    assert lin[0, 0].item() == -1.0
    assert lin[0, 1].item() == pytest.approx(-1.0 + math.log(0.5))
    # the log-linear rule is one fused op with no guard: a non-finite ℓ gives a non-finite π_prox, and
    # the loss drops that token, whose ℓ is not finite anyway
    prox = approximate_prox_logp("loglinear", behav, logp, versions, 2)
    assert not torch.isfinite(prox).any()
    logp = logp.clone().requires_grad_()
    loss, stats = policy_loss("decoupled", logp, behav, t([1.0]), torch.ones(1, 2, dtype=torch.bool), prox_logp=prox)
    assert loss.item() == 0.0 and stats["nonfinite_tokens"].item() == 2.0


def test_unknown_method_and_bad_shapes_raise():
    x = torch.zeros(2, 3)
    v = torch.zeros(2, 3, dtype=torch.long)
    for method in ("recompute", "none", "sometimes"):  # not approximations of π_prox
        with pytest.raises(ValueError, match="method"):
            approximate_prox_logp(method, x, x, v, 1)
    with pytest.raises(ValueError, match="versions"):
        approximate_prox_logp("loglinear", x, x, v[:, :2], 1)
    with pytest.raises(ValueError, match="versions"):
        approximate_prox_logp("loglinear", x, x, v.float(), 1)


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t_=st.integers(1, 8), spread=st.floats(0.0, 30.0),
       current=st.integers(0, 12), method=st.sampled_from(["loglinear", "linear"]))
def test_sandwich_property(seed, b, t_, spread, current, method):
    g = torch.Generator().manual_seed(seed)
    behav = -5.0 * torch.rand(b, t_, generator=g)
    logp = behav + spread * torch.randn(b, t_, generator=g)
    versions = torch.randint(-1, current + 2, (b, t_), generator=g)
    prox = approximate_prox_logp(method, behav, logp, versions, current)
    tol = 1e-5 * (1 + spread)
    assert (prox >= torch.minimum(behav, logp) - tol).all()
    assert (prox <= torch.maximum(behav, logp) + tol).all()


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t_=st.integers(1, 8), spread=st.floats(0.0, 15.0),
       current=st.integers(0, 12))
def test_loglinear_ratios_are_powers_of_rho(seed, b, t_, spread, current):
    """r = π_θ/π_prox = ρ^α and w = π_prox/π_behav = ρ^(1−α), so r·w = ρ."""
    g = torch.Generator().manual_seed(seed)
    behav = -5.0 * torch.rand(b, t_, generator=g)
    logp = behav + spread * torch.randn(b, t_, generator=g)
    versions = torch.randint(-1, current + 2, (b, t_), generator=g)
    prox = approximate_prox_logp("loglinear", behav, logp, versions, current)
    alpha = staleness_alpha(versions, current)
    log_rho = logp - behav
    torch.testing.assert_close(logp - prox, alpha * log_rho, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(prox - behav, (1 - alpha) * log_rho, rtol=1e-5, atol=1e-5)


def test_staleness_stats():
    versions = torch.tensor([[3, 1, -1, 5]])
    mask = torch.tensor([[True, True, True, True]])
    stats = staleness_stats(versions, 4, mask)
    assert stats["staleness_max"].item() == 3.0
    assert stats["staleness_min"].item() == -1.0
    assert stats["staleness_mean"].item() == pytest.approx((1 + 3 - 1) / 3)
    assert stats["future_version_tokens"].item() == 1.0


def test_approximate_prox_logp_is_the_trainer_path():
    """approximate_prox_logp is a strategy's plan and its one minibatch: the values the trainer gets
    from plan + minibatch rows, bit for bit; exactly ℓ_b wherever α = 1 (d <= 1, or not generated)."""
    g = torch.Generator().manual_seed(0)
    behav, logp = -3 * torch.rand(6, 9, generator=g), -3 * torch.rand(6, 9, generator=g)
    versions = torch.randint(-1, 7, (6, 9), generator=g)
    for method in ("loglinear", "linear", "behav"):
        plan = PROX_STRATEGIES[method].plan(behav, versions, 7)
        rows = torch.cat([plan.minibatch(0, 4, behav[:4], logp[:4], versions[:4]),
                          plan.minibatch(4, 6, behav[4:], logp[4:], versions[4:])])
        whole = approximate_prox_logp(method, behav, logp, versions, 7)
        assert torch.equal(rows, whole)
        on_behavior = staleness_alpha(versions, 7) == 1.0
        assert torch.equal(whole[on_behavior], behav[on_behavior])
    base, weights = loglinear_plan(behav, versions, 7)
    whole = approximate_prox_logp("loglinear", behav, logp, versions, 7)
    assert torch.equal(apply_loglinear(base, logp, weights), whole)
