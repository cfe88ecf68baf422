"""ESS, the ESS learning-rate rule and the OPOB baseline (docs/objectives.md), by hand."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.objectives import ess, ess_lr_scale, opob_baseline, policy_loss

from .helpers import t


def test_ess_by_hand_sequence_and_token_forms():
    # w = [1, 2, 3]: ESS = 36 / 14, fraction 36 / 42
    s = t([0.0, math.log(2.0), math.log(3.0)])
    value, frac = ess(s, torch.ones(3, dtype=torch.bool))
    assert value.item() == pytest.approx(36 / 14, rel=1e-6)
    assert frac.item() == pytest.approx(36 / 42, rel=1e-6)
    # Token form: the same S_i split over tokens, plus an all-masked row that must not count.
    log_w = t([[0.0, 0.0], [math.log(0.5), math.log(4.0)], [math.log(3.0), 9.0], [5.0, 5.0]])
    mask = torch.tensor([[True, True], [True, True], [True, False], [False, False]])
    value_t, frac_t = ess(log_w, mask)
    assert value_t.item() == pytest.approx(36 / 14, rel=1e-6)
    assert frac_t.item() == pytest.approx(36 / 42, rel=1e-6)


def test_ess_is_scale_free_and_safe():
    value, frac = ess(t([1000.0, 1000.0]), torch.ones(2, dtype=torch.bool))
    assert value.item() == pytest.approx(2.0) and frac.item() == pytest.approx(1.0)
    value, frac = ess(t([0.0, 60.0]), torch.ones(2, dtype=torch.bool))  # one weight dominates
    assert value.item() == pytest.approx(1.0) and frac.item() == pytest.approx(0.5)
    value, frac = ess(t([[1.0]]), torch.zeros(1, 1, dtype=torch.bool))
    assert value.item() == 0.0 and frac.item() == 0.0


def test_loss_stats_report_sequence_ess_of_rho():
    behav = torch.zeros(3, 1)
    logp = t([[0.0], [math.log(2.0)], [math.log(3.0)]]).requires_grad_()
    _, stats = policy_loss("reinforce", logp, behav, t([1.0, 1.0, 1.0]), torch.ones(3, 1, dtype=torch.bool))
    assert stats["ess_frac"].item() == pytest.approx(36 / 42, rel=1e-6)


def test_ess_lr_scale():
    assert ess_lr_scale(0.25) == pytest.approx(0.5)
    assert ess_lr_scale(0.25, base_ratio=0.5) == pytest.approx(math.sqrt(0.5))
    assert ess_lr_scale(0.25, base_ratio=0.5, rule="linear") == pytest.approx(0.5)
    assert ess_lr_scale(0.9, base_ratio=0.5) == 1.0
    torch.testing.assert_close(ess_lr_scale(torch.tensor(0.04)), torch.tensor(0.2))
    with pytest.raises(ValueError, match="rule"):
        ess_lr_scale(0.5, rule="cubic")
    with pytest.raises(ValueError, match="base_ratio"):
        ess_lr_scale(0.5, base_ratio=0.0)


def test_opob_baseline_by_hand():
    # W = ‖g‖² w² = [1, 4, 4]; group 0: (1·1 + 4·0) / 5 = 0.2; group 1: 2
    rewards, weights, g2 = t([1.0, 0.0, 2.0]), t([1.0, 2.0, 1.0]), t([1.0, 1.0, 4.0])
    b = opob_baseline(rewards, weights, g2, torch.tensor([4, 4, 9]))
    torch.testing.assert_close(b, t([0.2, 0.2, 2.0]))
    # One scope ("minibatch"): (1 + 0 + 8) / 9
    torch.testing.assert_close(opob_baseline(rewards, weights, g2), t([1.0, 1.0, 1.0]))
    # A common per-group scale of the weights cancels.
    torch.testing.assert_close(opob_baseline(rewards, 10 * weights, g2, torch.tensor([4, 4, 9])), b)
