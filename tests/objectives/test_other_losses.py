"""Hand-worked cases for cispo, opsm, m2po, gspo, vaco and reinforce (docs/objectives.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import call, from_ratios, make_batch, run, t

FAST = settings(max_examples=40, deadline=None)
E = math.exp


def test_cispo_hand_case():
    # r = [0.1, 1, 7], A = [1, 1, -1], cap_high 5: weights [0.1, 1, 5]; J = Σ sg(ŵ) A ℓ / 3
    logp, behav = from_ratios([[0.1, 1.0, 7.0]])
    adv = t([[1.0, 1.0, -1.0]])
    loss, stats, grad = call("cispo", logp, behav, adv)
    lp = logp.detach()[0].tolist()
    assert loss.item() == pytest.approx(-(0.1 * lp[0] + lp[1] - 5.0 * lp[2]) / 3, rel=1e-6)
    torch.testing.assert_close(grad, t([[-0.1, -1.0, 5.0]]) / 3)
    assert stats["clipped_tokens"].item() == pytest.approx(1 / 3)
    assert stats["clipfrac_upper"].item() == pytest.approx(1 / 3)
    # A lower cap of 0.5 lifts the first weight; clipping shrinks the gradient, never zeroes it.
    _, stats_l, grad_l = call("cispo", logp, behav, adv, cap_low=0.5)
    torch.testing.assert_close(grad_l, t([[-0.5, -1.0, 5.0]]) / 3)
    assert stats_l["clipfrac_lower"].item() == pytest.approx(1 / 3)


def test_opsm_hand_case():
    # δ = 0.1. row0: A = -1, ℓ_b − ℓ = [0.3, 0.1] -> KL̂ = 0.2 > δ -> masked
    #          row1: A = +1, same drift -> kept (positive advantage)
    #          row2: A = -1, ℓ_b − ℓ = [0.05, 0.05] -> KL̂ = 0.05 -> kept
    behav = torch.full((3, 2), -1.0)
    drift = t([[0.3, 0.1], [0.3, 0.1], [0.05, 0.05]])
    logp = (behav - drift).requires_grad_()
    adv = t([-1.0, 1.0, -1.0])
    loss, stats, grad = call("opsm", logp, behav, adv, delta=0.1)
    # Host PPO (eps 0.2, anchor π_behav): row1 r = e^-0.3, e^-0.1 (A > 0, r < 1: unclipped);
    # row2 r = e^-0.05 (A < 0, r > 0.8: unclipped). Denominator: all 6 tokens.
    expected = -(E(-0.3) + E(-0.1) - 2 * E(-0.05)) / 6
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    torch.testing.assert_close(grad, t([[0, 0], [-E(-0.3), -E(-0.1)], [E(-0.05), E(-0.05)]]) / 6)
    assert stats["masked_seq_frac"].item() == pytest.approx(1 / 3)
    assert stats["masked_neg_adv_seq_frac"].item() == pytest.approx(0.5)
    assert stats["seq_kl_max"].item() == pytest.approx(0.2, rel=1e-5)


def test_m2po_paper_hand_case():
    # log ρ = [0.1, -0.2, 0.3, 0.5] -> (log ρ)² = [.01, .04, .09, .25]; τ = 0.04.
    # Ascending prefix means: .01, .025, .0467, .0975 -> keep the two smallest.
    lr = [0.1, -0.2, 0.3, 0.5]
    logp, behav = from_ratios([[E(x) for x in lr]])
    adv = t([[1.0, 2.0, 3.0, 4.0]])
    loss, stats, grad = call("m2po", logp, behav, adv)
    assert loss.item() == pytest.approx(-(E(0.1) * 1 + E(-0.2) * 2) / 4, rel=1e-5)
    torch.testing.assert_close(grad, t([[-E(0.1), -2 * E(-0.2), 0.0, 0.0]]) / 4)
    assert stats["masked_token_frac"].item() == pytest.approx(0.5)
    assert stats["m2_before"].item() == pytest.approx(0.0975, rel=1e-4)
    assert stats["m2_after"].item() == pytest.approx(0.025, rel=1e-4)


def test_m2po_paper_keeps_at_least_one_token():
    logp, behav = from_ratios([[E(2.0), E(1.0), E(-3.0)]])
    _, stats, grad = call("m2po", logp, behav, t([1.0]))
    assert grad[0, 1].item() != 0.0 and grad[0, 0].item() == 0.0 and grad[0, 2].item() == 0.0
    assert stats["m2_after"].item() == pytest.approx(1.0, rel=1e-5)


def test_m2po_official_hand_case():
    # A = [1, 1, -1, -1, 1], log ρ = [0.5, 0.1, -0.3, 0.2, -0.4]; harmful: t0, t1 (A>0, ρ>1), t2 (A<0, ρ<1)
    # v = [.25, .01, .09], mean .1167 > τ = .04; water-filling Σ min(v, L) = .12:
    # sorted [.01, .09, .25]: G1 = .01 + 2·.01 = .03 <= .12, G2 = .10 + .09 = .19 > .12 -> L = (.12 − .01)/2
    lr = [0.5, 0.1, -0.3, 0.2, -0.4]
    logp, behav = from_ratios([[E(x) for x in lr]])
    adv = t([[1.0, 1.0, -1.0, -1.0, 1.0]])
    level = (0.12 - 0.01) / 2
    tau_star = math.sqrt(level)
    # With the official floors (0.3, 0.5) the bounds are [0.7, 1.5]: only t0 (ρ = 1.65 > 1.5, A > 0) clips.
    loss, stats, grad = call("m2po", logp, behav, adv, variant="official")
    j = [1.5, E(0.1), -E(-0.3), -E(0.2), E(-0.4)]
    assert loss.item() == pytest.approx(-sum(j) / 5, rel=1e-5)
    torch.testing.assert_close(grad, t([[0.0, -E(0.1), E(-0.3), E(0.2), -E(-0.4)]]) / 5)
    assert stats["m2po_eps_low"].item() == pytest.approx(0.3)
    assert stats["m2po_eps_high"].item() == pytest.approx(0.5)
    assert stats["m2_before"].item() == pytest.approx(0.35 / 3, rel=1e-5)
    assert stats["m2_after"].item() == pytest.approx(0.04, rel=1e-5)
    # Without floors the derived bounds act: ε_low = 1 − e^{−τ*}, ε_high = e^{τ*} − 1.
    loss_n, stats_n, _ = call("m2po", logp, behav, adv, variant="official", floor_eps_low=0.0, floor_eps_high=0.0)
    assert stats_n["m2po_eps_low"].item() == pytest.approx(1 - E(-tau_star), rel=1e-5)
    assert stats_n["m2po_eps_high"].item() == pytest.approx(E(tau_star) - 1, rel=1e-5)
    # t0 clips at e^τ*, t2 (ρ = e^-.3 < e^-τ*) clips at e^-τ*, t1 (e^.1 < e^τ*) does not.
    j_n = [E(tau_star), E(0.1), -E(-tau_star), -E(0.2), E(-0.4)]
    assert loss_n.item() == pytest.approx(-sum(j_n) / 5, rel=1e-5)
    # τ above the harmful M2: nothing is constrained, the loss is plain −mean ρ A.
    loss_u, stats_u, _ = call("m2po", logp, behav, adv, variant="official", tau=1.0)
    assert loss_u.item() == pytest.approx(-sum(a * E(x) for a, x in zip([1, 1, -1, -1, 1], lr)) / 5, rel=1e-5)
    assert math.isinf(stats_u["m2po_eps_high"].item()) and stats_u["clipped_tokens"].item() == 0.0


@FAST
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 40), tau=st.floats(1e-3, 1.0))
def test_m2po_water_filling_meets_the_budget(seed, n, tau):
    from asyncrl.objectives.m2po import water_fill_level

    g = torch.Generator().manual_seed(seed)
    v = (torch.randn(1, n, generator=g) ** 2)
    sel = torch.rand(1, n, generator=g) < 0.7
    level = water_fill_level(v, sel, tau)
    m = int(sel.sum())
    if m == 0 or v[sel].mean() <= tau:
        assert math.isinf(level.item())
    else:
        assert torch.minimum(v[sel], level).sum().item() == pytest.approx(tau * m, rel=1e-4)


def test_gspo_hand_case():
    # row0 log-ratios [0.1, 0.3] -> s = e^0.2 = 1.221 > 1.2, A = +1 -> clipped, J = 1.2
    # row1 [-0.1, 0.1] -> s = 1, A = -1 -> J = -1, gradient s·A/n_i per token
    behav = torch.full((2, 2), -1.0)
    logp = (behav + t([[0.1, 0.3], [-0.1, 0.1]])).requires_grad_()
    adv = t([1.0, -1.0])
    loss, stats, grad = call("gspo", logp, behav, adv, eps_low=0.2, eps_high=0.2)
    # token_mean: Σ_i n_i J_i / 4
    assert loss.item() == pytest.approx(-(2 * 1.2 - 2 * 1.0) / 4, rel=1e-5)
    torch.testing.assert_close(grad, t([[0.0, 0.0], [0.5, 0.5]]) * 2 / 4)
    assert stats["seq_clipfrac"].item() == pytest.approx(0.5)
    assert stats["seq_ratio_max"].item() == pytest.approx(E(0.2), rel=1e-5)
    # Paper aggregation (1/G) Σ_i J_i with unequal lengths: row1 has one masked token.
    mask = torch.tensor([[True, True], [True, False]])
    loss_s, _, grad_s = call("gspo", logp, behav, adv, mask, eps_low=0.2, eps_high=0.2, agg="seq_mean_token_mean")
    s1 = E(-0.1)
    assert loss_s.item() == pytest.approx(-(1.2 - s1) / 2, rel=1e-5)
    torch.testing.assert_close(grad_s, t([[0.0, 0.0], [s1 / 2, 0.0]]))
    # Default (paper) eps 3e-4 / 4e-4: row1 s = 1 is inside, row0 clipped at 1.0004.
    loss_d, _, _ = call("gspo", logp, behav, adv)
    assert loss_d.item() == pytest.approx(-(2 * 1.0004 - 2 * 1.0) / 4, abs=1e-6)


def test_gspo_uses_the_sequence_mean_of_token_advantages():
    # Token advantages [3, −1] -> Â = 1 > 0; s = e^0.3 > 1.2: the whole sequence is clipped (J = 1.2 Â).
    behav = torch.full((1, 2), -1.0)
    logp = (behav + 0.3).requires_grad_()
    loss, _, grad = call("gspo", logp, behav, t([[3.0, -1.0]]), eps_low=0.2, eps_high=0.2)
    assert loss.item() == pytest.approx(-1.2, rel=1e-6)
    assert torch.equal(grad, torch.zeros_like(grad))
    # GSPO-token keeps the token advantages: the A < 0 token is not clipped at r > 1 + ε.
    _, _, grad_tok = call("gspo", logp, behav, t([[3.0, -1.0]]), eps_low=0.2, eps_high=0.2, token_level=True)
    assert grad_tok[0, 0].item() == 0.0 and grad_tok[0, 1].item() == pytest.approx(E(0.3) / 2, rel=1e-5)


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), t_=st.integers(1, 6), with_prox=st.booleans())
def test_gspo_token_matches_gspo_with_sequence_advantages(seed, b, t_, with_prox):
    batch = make_batch(seed, b, t_, spread=0.01, with_prox=with_prox)
    params = {"eps_low": 0.01, "eps_high": 0.01, "agg": "seq_mean_token_mean"}
    loss, _, grad = run("gspo", batch, **params)
    loss_tok, _, grad_tok = run("gspo", batch, token_level=True, **params)
    torch.testing.assert_close(loss_tok, loss)
    torch.testing.assert_close(grad_tok, grad, rtol=1e-5, atol=1e-7)


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), with_prox=st.booleans())
def test_gspo_equals_ppo_when_t_is_1(seed, b, with_prox):
    batch = make_batch(seed, b, 1, spread=0.3, with_prox=with_prox)
    loss, _, grad = run("gspo", batch, eps_low=0.2, eps_high=0.2)
    loss_p, _, grad_p = run("ppo", batch)
    torch.testing.assert_close(loss, loss_p)
    torch.testing.assert_close(grad, grad_p)


def test_vaco_hand_case():
    # ρ = [1.5, 0.5, 1.2, 0.9], A = [1, 1, -1, -1]; TV̂ = ½·(.5 + .5 + .2 + .1)/4 = 0.1625
    logp, behav = from_ratios([[1.5, 0.5, 1.2, 0.9]])
    adv = t([[1.0, 1.0, -1.0, -1.0]])
    loss, stats, grad = call("vaco", logp, behav, adv)  # δ = 0.05 -> fires
    assert loss.item() == pytest.approx(-(1.5 + 0.5 - 1.2 - 0.9) / 4, rel=1e-5)
    # t0 (ρ > 1, A > 0) and t3 (ρ < 1, A < 0) would increase TV: detached.
    torch.testing.assert_close(grad, t([[0.0, -0.5, 1.2, 0.0]]) / 4)
    assert stats["tv_estimate"].item() == pytest.approx(0.1625, rel=1e-5)
    assert stats["filter_fired"].item() == 1.0
    assert stats["detached_token_frac"].item() == pytest.approx(0.5)
    _, stats_q, grad_q = call("vaco", logp, behav, adv, delta=0.2)  # below threshold: nothing filtered
    torch.testing.assert_close(grad_q, t([[-1.5, -0.5, 1.2, 0.9]]) / 4)
    assert stats_q["filter_fired"].item() == 0.0


def test_reinforce_hand_case():
    logp = t([[-1.0, -2.0], [-0.5, -3.0]]).requires_grad_()
    mask = torch.tensor([[True, True], [True, False]])
    loss, stats, grad = call("reinforce", logp, logp.detach() + 1.0, t([2.0, -1.0]), mask)
    assert loss.item() == pytest.approx(-(2 * -1.0 + 2 * -2.0 - 1 * -0.5) / 3)
    torch.testing.assert_close(grad, t([[-2.0, -2.0], [1.0, 0.0]]) / 3)
    assert stats["clipped_tokens"].item() == 0.0
    assert stats["importance_weight_mean"].item() == pytest.approx(E(-1.0), rel=1e-6)
    # Every valid ratio is below 1 and the masked slot holds 0 = log 1: the max must not see it.
    assert stats["importance_weight_max"].item() == pytest.approx(E(-1.0), rel=1e-6)
    assert stats["ratio_max"].item() == pytest.approx(E(-1.0), rel=1e-6)


def test_batch_level_filters_depend_on_the_whole_call():
    """Documented limitation: vaco's TV̂ (and m2po's M₂) is a statistic of the call, so a micro-batch can
    decide differently from the whole minibatch. Here the whole batch fires, row 1 alone does not."""
    logp, behav = from_ratios([[1.5, 0.5], [1.01, 0.99]])
    adv = t([1.0, 1.0])
    _, stats, grad = call("vaco", logp, behav, adv)
    assert stats["filter_fired"].item() == 1.0 and grad[1, 0].item() == 0.0
    logp1 = logp.detach()[1:].clone().requires_grad_()
    _, stats1, grad1 = call("vaco", logp1, behav[1:], adv[1:], global_num_tokens=4)
    assert stats1["filter_fired"].item() == 0.0 and grad1[0, 0].item() != 0.0
