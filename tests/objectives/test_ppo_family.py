"""Hand-worked cases for ppo and decoupled, and their equivalences (docs/objectives.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.objectives import AGG_MODES, approximate_prox_logp

from .helpers import call, from_ratios, make_batch, run, t

FAST = settings(max_examples=40, deadline=None)


def test_ppo_hand_case():
    # r = [1.0, 1.5, 0.5, 1.1], A = [1, 1, -1, -1], eps 0.2; a 5th token is masked and holds garbage.
    logp, behav = from_ratios([[1.0, 1.5, 0.5, 1.1, 1.0]])
    with torch.no_grad():
        logp[0, 4] = float("nan")
    adv = t([[1.0, 1.0, -1.0, -1.0, 5.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    loss, stats, grad = call("ppo", logp, behav, adv, mask)
    # t0: unclipped, J = 1.0          t1: A>0, r > 1.2 -> J = 1.2 (clipped, no grad)
    # t2: A<0, r < 0.8 -> J = -0.8 (clipped)   t3: A<0, r = 1.1 -> J = -1.1 (unclipped, grad A r)
    expected = -(1.0 + 1.2 - 0.8 - 1.1) / 4
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    torch.testing.assert_close(grad, t([[-1.0 / 4, 0.0, 0.0, 1.1 / 4, 0.0]]))
    assert stats["clipfrac_upper"].item() == pytest.approx(0.25)
    assert stats["clipfrac_lower"].item() == pytest.approx(0.25)
    assert stats["clipped_tokens"].item() == pytest.approx(0.5)
    assert stats["dual_clipfrac"].item() == 0.0
    assert stats["n_valid_tokens"].item() == 4
    assert stats["nonfinite_tokens"].item() == 0  # the NaN is outside loss_mask
    logs = [0.0, math.log(1.5), math.log(0.5), math.log(1.1)]
    assert stats["approx_kl_k1"].item() == pytest.approx(-sum(logs) / 4, rel=1e-5)
    k3 = sum(math.exp(x) - 1 - x for x in logs) / 4
    assert stats["approx_kl_k3"].item() == pytest.approx(k3, rel=1e-5)
    assert stats["ratio_max"].item() == pytest.approx(1.5, rel=1e-6)
    assert stats["ratio_min"].item() == pytest.approx(0.5, rel=1e-6)
    assert stats["ratio_mean"].item() == pytest.approx((1 + 1.5 + 0.5 + 1.1) / 4, rel=1e-6)
    assert stats["tv"].item() == pytest.approx(0.5 * (0 + 0.5 + 0.5 + 0.1) / 4, rel=1e-5)


def test_ppo_asymmetric_and_dual_clip():
    # r = [1.25, 4.0, 2.0], A = [1, -1, -1]; eps_low 0.2, eps_high 0.28, dual clip c = 3.
    logp, behav = from_ratios([[1.25, 4.0, 2.0]])
    adv = t([[1.0, -1.0, -1.0]])
    loss, stats, grad = call("ppo", logp, behav, adv, eps_low=0.2, eps_high=0.28, dual_clip=3.0)
    # t0: 1.25 < 1.28 -> unclipped J = 1.25   t1: r = 4 > c -> J = max(-4, -3) = -3, no grad
    # t2: r = 2 < c -> J = -2, grad A r = -2
    assert loss.item() == pytest.approx(-(1.25 - 3.0 - 2.0) / 3, abs=1e-6)
    torch.testing.assert_close(grad, t([[-1.25 / 3, 0.0, 2.0 / 3]]))
    assert stats["dual_clipfrac"].item() == pytest.approx(1 / 3)
    assert stats["clipfrac_upper"].item() == 0.0
    # Symmetric 0.2 would clip t0.
    _, stats_sym, grad_sym = call("ppo", logp, behav, adv, dual_clip=3.0)
    assert stats_sym["clipfrac_upper"].item() == pytest.approx(1 / 3)
    assert grad_sym[0, 0].item() == 0.0


def test_ppo_uses_prox_as_anchor_without_behavior_weight():
    logp, behav = from_ratios([[3.0, 3.0]])
    prox = logp.detach() - math.log(1.1)  # r = 1.1 against prox, ρ = 3 against behav
    loss, stats, _ = call("ppo", logp, behav, t([[1.0, 1.0]]), prox_logp=prox)
    assert loss.item() == pytest.approx(-1.1, rel=1e-6)
    assert stats["ratio_mean"].item() == pytest.approx(1.1, rel=1e-6)
    assert stats["importance_weight_mean"].item() == pytest.approx(3.0, rel=1e-6)


def test_decoupled_hand_case_and_behavior_cap():
    # w = π_prox/π_behav = [2, 0.5, 6], r = π_θ/π_prox = [1.1, 1.3, 1.0], A = 1.
    w = [2.0, 0.5, 6.0]
    r = [1.1, 1.3, 1.0]
    behav = torch.full((1, 3), -2.0)
    prox = behav + torch.log(t([w]))
    logp = (prox + torch.log(t([r]))).requires_grad_()
    adv = t([[1.0, 1.0, 1.0]])
    # J = w · PPOclip(r): [2·1.1, 0.5·1.2 (clipped), 6·1.0]
    loss, stats, grad = call("decoupled", logp, behav, adv, prox_logp=prox)
    assert loss.item() == pytest.approx(-(2.2 + 0.6 + 6.0) / 3, rel=1e-6)
    torch.testing.assert_close(grad, t([[-2.2 / 3, 0.0, -6.0 / 3]]))
    assert stats["behav_weight_max"].item() == pytest.approx(6.0, rel=1e-6)
    assert stats["behav_weight_mean"].item() == pytest.approx(8.5 / 3, rel=1e-6)
    assert stats["behav_kl_k1"].item() == pytest.approx(-sum(map(math.log, w)) / 3, rel=1e-5)
    # cap 5, mask: the w = 6 token is dropped, denominator stays 3 (pre-filter count).
    loss_m, stats_m, grad_m = call("decoupled", logp, behav, adv, prox_logp=prox, behav_cap=5.0)
    assert loss_m.item() == pytest.approx(-(2.2 + 0.6) / 3, rel=1e-6)
    assert grad_m[0, 2].item() == 0.0
    assert stats_m["masked_token_frac"].item() == pytest.approx(1 / 3)
    assert stats_m["behav_capped_frac"].item() == pytest.approx(1 / 3)
    assert stats_m["clipped_tokens"].item() == pytest.approx(2 / 3)  # one PPO clip + one cap
    # Denominator of survivors only when asked.
    loss_k, _, _ = call("decoupled", logp, behav, adv, prox_logp=prox, behav_cap=5.0,
                        keep_filtered_in_denominator=False)
    assert loss_k.item() == pytest.approx(-(2.2 + 0.6) / 2, rel=1e-6)
    # cap 5, clamp: weight min(6, 5) = 5 and the token keeps its gradient.
    loss_c, stats_c, grad_c = call("decoupled", logp, behav, adv, prox_logp=prox, behav_cap=5.0,
                                   behav_cap_mode="clamp")
    assert loss_c.item() == pytest.approx(-(2.2 + 0.6 + 5.0) / 3, rel=1e-6)
    assert grad_c[0, 2].item() == pytest.approx(-5.0 / 3, rel=1e-6)
    assert stats_c["masked_token_frac"].item() == 0.0


def test_decoupled_without_prox_or_versions_raises():
    logp, behav = from_ratios([[1.0, 1.0]])
    with pytest.raises(ValueError, match="prox_logp"):
        call("decoupled", logp, behav, t([1.0]))


def test_decoupled_a3po_hand_case():
    # V = 3, versions [3, 2, 1, 0] -> d = [0, 1, 2, 3], α = [1, 1, 1/2, 1/3]; ρ = [2, 2, 4, 8], A = 1.
    logp, behav = from_ratios([[2.0, 2.0, 4.0, 8.0]])
    versions = torch.tensor([[3, 2, 1, 0]])
    a3po = {"prox_logp": approximate_prox_logp("loglinear", behav, logp, versions, 3), "versions": versions,
            "current_version": 3}
    loss, stats, grad = call("decoupled", logp, behav, t([1.0]), **a3po, eps_low=0.5, eps_high=0.5)
    # r = ρ^α = [2, 2, 2, 2] > 1.5 for all: every token clipped, J = w · 1.5 with w = ρ^(1−α) = [1, 1, 2, 4]
    assert loss.item() == pytest.approx(-1.5 * (1 + 1 + 2 + 4) / 4, rel=1e-5)
    assert torch.equal(grad, torch.zeros_like(grad))
    assert stats["ratio_mean"].item() == pytest.approx(2.0, rel=1e-5)
    assert stats["behav_weight_max"].item() == pytest.approx(4.0, rel=1e-5)
    assert stats["staleness_max"].item() == 3.0
    # Unclipped (wide eps): gradient w·r·A = ρ·A per token, as for IS on π_behav.
    _, _, grad_w = call("decoupled", logp, behav, t([1.0]), **a3po, eps_low=0.5, eps_high=100.0)
    torch.testing.assert_close(grad_w, t([[-2.0, -2.0, -4.0, -8.0]]) / 4, rtol=1e-5, atol=0)


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t_=st.integers(1, 6), agg=st.sampled_from(AGG_MODES),
       dual=st.sampled_from([None, 3.0]))
def test_decoupled_with_prox_equal_behav_is_ppo(seed, b, t_, agg, dual):
    batch = make_batch(seed, b, t_, spread=1.0)
    batch["prox_logp"] = batch["behav_logp"].clone()
    loss_d, _, grad_d = run("decoupled", batch, agg=agg, dual_clip=dual)
    batch["prox_logp"] = None
    loss_p, _, grad_p = run("ppo", batch, agg=agg, dual_clip=dual)
    torch.testing.assert_close(loss_d, loss_p, rtol=0, atol=0)
    torch.testing.assert_close(grad_d, grad_p, rtol=0, atol=0)


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t_=st.integers(1, 6), agg=st.sampled_from(AGG_MODES),
       lag=st.sampled_from([0, 1]))
def test_decoupled_with_loglinear_prox_at_staleness_0_or_1_is_ppo(seed, b, t_, agg, lag):
    batch = make_batch(seed, b, t_, spread=1.0, with_prox=False)
    batch["versions"] = torch.full((b, t_), 7 - lag)
    batch["current_version"] = 7
    batch["prox_logp"] = approximate_prox_logp("loglinear", batch["behav_logp"], batch["logp"], batch["versions"], 7)
    loss_d, _, grad_d = run("decoupled", batch, agg=agg)
    batch["prox_logp"] = None
    loss_p, _, grad_p = run("ppo", batch, agg=agg)
    torch.testing.assert_close(loss_d, loss_p, rtol=0, atol=0)
    torch.testing.assert_close(grad_d, grad_p, rtol=0, atol=0)


def test_decoupled_without_prox_logp_raises():
    """No silent fallback: decoupled is built on π_prox, and versions alone do not make one."""
    batch = make_batch(0, 3, 4, with_prox=False)
    with pytest.raises(ValueError, match="decoupled.*prox_logp"):
        run("decoupled", batch)
