"""Hand-worked cases for the penalty losses spo and ppo_kl (the classic-control baselines)."""

from __future__ import annotations

import math

import pytest
import torch

from .helpers import call, from_ratios, t


def test_spo_hand_case():
    # r = [1.5, 0.5, 1.0], A = [1, -2, 1], ε = 0.2:  J = r A − |A| (r − 1)² / 0.4
    #   t0: 1.5 − 0.625 = 0.875;  t1: −1 − 1.25 = −2.25;  t2: 1
    logp, behav = from_ratios([[1.5, 0.5, 1.0]])
    adv = t([[1.0, -2.0, 1.0]])
    loss, stats, grad = call("spo", logp, behav, adv, eps=0.2)
    assert loss.item() == pytest.approx(-(0.875 - 2.25 + 1.0) / 3, rel=1e-5)
    # dJ/dℓ = r (A − |A| (r − 1) / ε):  t0: 1.5 (1 − 2.5) = −2.25;  t1: 0.5 (−2 + 5) = 1.5;  t2: 1
    torch.testing.assert_close(grad, t([[2.25, -1.5, -1.0]]) / 3)
    assert stats["beyond_trust_frac"].item() == pytest.approx(2 / 3)
    assert stats["clipped_tokens"].item() == 0.0


def test_spo_optimum_sits_at_the_trust_region_edge():
    # The gradient vanishes at r = 1 + ε for A > 0 and r = 1 − ε for A < 0.
    logp, behav = from_ratios([[1.3, 0.7]])
    _, _, grad = call("spo", logp, behav, t([[3.0, -0.5]]), eps=0.3)
    torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-6, rtol=0)


def test_ppo_kl_hand_case():
    # r = [1.5, 0.5], A = [1, 1], ε = 0.2, β = 1. t0 is clipped (1.2 A, no surrogate gradient);
    # k3 = (r − 1) − log r, dk3/dℓ = r − 1.
    logp, behav = from_ratios([[1.5, 0.5]])
    adv = t([[1.0, 1.0]])
    loss, stats, grad = call("ppo_kl", logp, behav, adv, kl_coef=1.0)
    k3 = [0.5 - math.log(1.5), -0.5 - math.log(0.5)]
    assert loss.item() == pytest.approx(-((1.2 - k3[0]) + (0.5 - k3[1])) / 2, rel=1e-5)
    torch.testing.assert_close(grad, t([[-(0.0 - 0.5), -(0.5 + 0.5)]]) / 2)
    assert stats["kl_penalty"].item() == pytest.approx(sum(k3) / 2, rel=1e-5)
    assert stats["clipfrac_upper"].item() == pytest.approx(0.5)


def test_ppo_kl_with_zero_coef_is_ppo():
    logp, behav = from_ratios([[1.5, 0.5, 0.9, 1.1]])
    adv = t([[1.0, -1.0, 2.0, -0.5]])
    loss_kl, _, grad_kl = call("ppo_kl", logp, behav, adv, kl_coef=0.0)
    loss_ppo, _, grad_ppo = call("ppo", logp, behav, adv)
    torch.testing.assert_close(loss_kl, loss_ppo, rtol=0, atol=0)
    torch.testing.assert_close(grad_kl, grad_ppo, rtol=0, atol=0)
