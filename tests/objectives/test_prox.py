"""approximate_prox_logp (A-3PO and friends, docs/objectives.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.objectives import approximate_prox_logp, staleness_alpha, staleness_stats

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


def test_on_behavior_positions_ignore_non_finite_current_logp():
    versions = torch.tensor([[2, 0]])  # V = 2: α = [1, 1/2]
    behav = t([[-1.0, -1.0]])
    logp = t([[float("nan"), float("-inf")]])
    for method in ("loglinear", "linear"):
        prox = approximate_prox_logp(method, behav, logp, versions, 2)
        assert prox[0, 0].item() == -1.0  # α = 1: exactly the behavior log-prob, the NaN never read
    # α = 1/2 with p_θ = 0: loglinear gives −inf (left to the loss's validity mask); the probability
    # mixture is exactly log(½ p_b).
    assert approximate_prox_logp("loglinear", behav, logp, versions, 2)[0, 1].item() == float("-inf")
    lin = approximate_prox_logp("linear", behav, logp, versions, 2)[0, 1].item()
    assert lin == pytest.approx(-1.0 + math.log(0.5))


def test_unknown_method_and_bad_shapes_raise():
    x = torch.zeros(2, 3)
    v = torch.zeros(2, 3, dtype=torch.long)
    with pytest.raises(ValueError, match="method"):
        approximate_prox_logp("recompute", x, x, v, 1)
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


def test_split_loglinear_path_equals_approximate_prox_logp():
    """The trainer's hot path (plan once per step, one fused op per minibatch) is the same function."""
    import torch

    from asyncrl.objectives import apply_loglinear, approximate_prox_logp, loglinear_plan

    g = torch.Generator().manual_seed(0)
    behav, logp = -3 * torch.rand(6, 9, generator=g), -3 * torch.rand(6, 9, generator=g)
    versions = torch.randint(-1, 7, (6, 9), generator=g)
    base, weights = loglinear_plan(behav, versions, 7)
    reference = approximate_prox_logp("loglinear", behav, logp, versions, 7)
    generated = versions >= 0  # the hot path only promises the A-3PO value on generated tokens
    torch.testing.assert_close(apply_loglinear(base, logp, weights)[generated], reference[generated],
                               rtol=1e-6, atol=1e-6)
    # exactly the behavior log-prob where α = 1 (on-policy or one step stale)
    out = apply_loglinear(base, logp, weights)
    assert torch.equal(out[versions >= 6], behav[versions >= 6])
    assert torch.isfinite(out).all()
    # the reference form keeps ℓ_b there even when the current log-prob is not finite
    logp[versions >= 6] = float("-inf")
    assert torch.equal(approximate_prox_logp("loglinear", behav, logp, versions, 7)[versions >= 6],
                       behav[versions >= 6])
