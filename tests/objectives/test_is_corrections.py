"""Hand-worked cases for tis and mis (docs/objectives.md)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import call, from_ratios, make_batch, run, t

FAST = settings(max_examples=40, deadline=None)


def _prox_case(w: list, r: list, base: float = -2.0):
    """(logp, behav, prox) with π_prox/π_behav = w and π_θ/π_prox = r."""
    behav = torch.full((len(w), len(w[0])), base)
    prox = behav + torch.log(t(w))
    logp = (prox + torch.log(t(r))).requires_grad_()
    return logp, behav, prox


def test_tis_token_hand_case():
    # w = [3, 1, 0.5], cap 2 -> weights [2, 1, 0.5]; r = 1; A = [1, -1, 2]: J = [2, -1, 1]
    logp, behav, prox = _prox_case([[3.0, 1.0, 0.5]], [[1.0, 1.0, 1.0]])
    adv = t([[1.0, -1.0, 2.0]])
    loss, stats, grad = call("tis", logp, behav, adv, prox_logp=prox)
    assert loss.item() == pytest.approx(-(2.0 - 1.0 + 1.0) / 3, rel=1e-6)
    torch.testing.assert_close(grad, t([[-2.0, 1.0, -1.0]]) / 3)  # weight · A · r, r = 1
    assert stats["truncated_frac"].item() == pytest.approx(1 / 3)
    assert stats["applied_weight_max"].item() == pytest.approx(2.0, rel=1e-6)
    assert stats["chi2"].item() == pytest.approx((9 + 1 + 0.25) / 3 - 1, rel=1e-5)


def test_tis_sequence_hand_case():
    # row0 w = [2, 2] -> S = log 4 -> min(4, 2) = 2; row1 w = [0.5, 1.5] -> 0.75. r = 1; A = [1, 2] per row
    logp, behav, prox = _prox_case([[2.0, 2.0], [0.5, 1.5]], [[1.0, 1.0], [1.0, 1.0]])
    adv = t([1.0, 2.0])
    loss, stats, grad = call("tis", logp, behav, adv, prox_logp=prox, level="sequence")
    assert loss.item() == pytest.approx(-(2 + 2 + 1.5 + 1.5) / 4, rel=1e-6)
    torch.testing.assert_close(grad, t([[-2.0, -2.0], [-1.5, -1.5]]) / 4)
    assert stats["truncated_frac"].item() == pytest.approx(0.5)


def test_tis_bypass_is_truncated_reinforce():
    # No prox: weight min(ρ, 2) on REINFORCE; ρ = [3, 0.5], A = 1.
    logp, behav = from_ratios([[3.0, 0.5]])
    loss, stats, grad = call("tis", logp, behav, t([1.0]))
    lp = logp.detach()[0]
    assert loss.item() == pytest.approx(-(2.0 * lp[0].item() + 0.5 * lp[1].item()) / 2, rel=1e-6)
    torch.testing.assert_close(grad, t([[-2.0, -0.5]]) / 2)
    assert stats["ratio_max"].item() == pytest.approx(3.0, rel=1e-6)  # r = ρ in bypass
    assert stats["behav_weight_mean"].item() == 1.0  # w ≡ 1 without prox (§0)


def test_mis_token_hand_case():
    # w = [0.4, 1, 6, 2] in band [0.5, 5] -> keep [no, yes, no, yes], weights 1 and 2; r = 1, A = 1.
    logp, behav, prox = _prox_case([[0.4, 1.0, 6.0, 2.0]], [[1.0, 1.0, 1.0, 1.0]])
    loss, stats, grad = call("mis", logp, behav, t([1.0]), prox_logp=prox)
    assert loss.item() == pytest.approx(-(1.0 + 2.0) / 4, rel=1e-6)
    torch.testing.assert_close(grad, t([[0.0, -1.0, 0.0, -2.0]]) / 4)
    assert stats["masked_token_frac"].item() == pytest.approx(0.5)
    assert stats["masked_seq_frac"].item() == 0.0
    assert stats["applied_weight_mean"].item() == pytest.approx(1.5, rel=1e-6)


def test_mis_sequence_and_geometric_hand_cases():
    # row0 w = [2, 2]: S = 4 (kept, weight 4), geo 2 (kept, weight 2)
    # row1 w = [3, 3]: S = 9 (rejected),        geo 3 (kept, weight 3)
    # row2 w = [6, 6]: S = 36 (rejected),       geo 6 (rejected)
    # row3 is padding (all outside loss_mask): it counts in no denominator and no sequence fraction.
    logp, behav, prox = _prox_case([[2.0, 2.0], [3.0, 3.0], [6.0, 6.0], [9.0, 9.0]], [[1.0] * 2] * 4)
    mask = torch.tensor([[True, True]] * 3 + [[False, False]])
    adv = t([1.0, 1.0, 1.0, 1.0])
    loss, stats, _ = call("mis", logp, behav, adv, mask, prox_logp=prox, level="sequence")
    assert loss.item() == pytest.approx(-(4.0 + 4.0) / 6, rel=1e-5)
    assert stats["masked_seq_frac"].item() == pytest.approx(2 / 3)
    loss_g, stats_g, _ = call("mis", logp, behav, adv, mask, prox_logp=prox, level="geometric")
    assert loss_g.item() == pytest.approx(-(2.0 * 2 + 3.0 * 2) / 6, rel=1e-5)
    assert stats_g["masked_seq_frac"].item() == pytest.approx(1 / 3)
    assert stats_g["masked_token_frac"].item() == pytest.approx(1 / 3)


def test_mis_bypass_hand_case():
    # No prox: band on ρ = [0.4, 2]; the first token is rejected; J = sg(2) A ℓ for the second.
    logp, behav = from_ratios([[0.4, 2.0]])
    loss, _, grad = call("mis", logp, behav, t([[1.0, 3.0]]))
    assert loss.item() == pytest.approx(-(2.0 * 3.0 * logp[0, 1].item()) / 2, rel=1e-6)
    torch.testing.assert_close(grad, t([[0.0, -6.0 / 2]]))


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 5), with_prox=st.booleans())
def test_token_and_sequence_levels_agree_when_t_is_1(seed, b, with_prox):
    batch = make_batch(seed, b, 1, spread=1.5, with_prox=with_prox)
    for name, levels in (("tis", ("token", "sequence")), ("mis", ("token", "sequence", "geometric"))):
        results = [run(name, batch, level=level) for level in levels]
        for loss, _, grad in results[1:]:
            torch.testing.assert_close(loss, results[0][0])
            torch.testing.assert_close(grad, results[0][2])


def test_tis_large_sequence_weights_do_not_overflow():
    # Σ log w = 200 per sequence: clamped before exp, truncated to the cap.
    logp, behav, prox = _prox_case([[math.exp(20.0)] * 10], [[1.0] * 10])
    loss, stats, grad = call("tis", logp, behav, t([1.0]), prox_logp=prox, level="sequence")
    assert loss.item() == pytest.approx(-2.0, rel=1e-6)
    assert torch.isfinite(grad).all()
