"""Hand-worked cases for the stability machinery: ESS and the ESS-scaled learning rate, OPOB
advantages, the ESS warning and the adaptive staleness window."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from asyncrl.stability import AdaptiveStalenessConfig, AdaptiveWindow, EssMonitor, EssWarningConfig
from asyncrl.stability.ess_lr import lr_scale, minibatch_ess, scaled_lr
from asyncrl.stability.opob import opob_advantages, score_grad_sq_norms


def _two_sequences(log_w_second: float):
    """Two sequences of 2 tokens; the second's log-weight sits on its first token."""
    behav = torch.zeros(2, 2)
    logp = torch.tensor([[0.0, 0.0], [log_w_second, 0.0]])
    return logp, behav, torch.ones(2, 2, dtype=torch.bool)


def test_ess_by_hand():
    # w = [1, 3]: ESS = (1 + 3)² / (1 + 9) = 1.6, ρ = 0.8
    value, frac = minibatch_ess(*_two_sequences(math.log(3)))
    assert value == pytest.approx(1.6, rel=1e-6) and frac == pytest.approx(0.8, rel=1e-6)
    # capped at 2: w = [1, 2]: ESS = 9 / 5 = 1.8, ρ = 0.9
    _, frac = minibatch_ess(*_two_sequences(math.log(3)), weight_cap=2.0)
    assert frac == pytest.approx(0.9, rel=1e-6)
    # masked-out tokens do not count: the log-weight sits on a padded position
    logp, behav, mask = _two_sequences(math.log(3))
    mask[1, 0] = False
    assert minibatch_ess(logp, behav, mask)[1] == pytest.approx(1.0)


def test_lr_scale_rules_by_hand():
    assert lr_scale(0.8, 1.0, "sqrt") == pytest.approx(math.sqrt(0.8))
    assert lr_scale(0.8, 1.0, "linear") == pytest.approx(0.8)
    assert lr_scale(0.8, 0.5, "sqrt") == 1.0  # above the on-policy reference: no change
    assert lr_scale(0.0, 1.0, "sqrt") == 0.0


def test_scaled_lr_sets_and_restores_every_group():
    params = [torch.nn.Parameter(torch.zeros(1)), torch.nn.Parameter(torch.zeros(1))]
    opt = torch.optim.AdamW([{"params": params[:1], "lr": 1e-3}, {"params": params[1:], "lr": 2e-3}])
    with scaled_lr(opt, 0.5):
        assert [g["lr"] for g in opt.param_groups] == [5e-4, 1e-3]
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 2e-3]


def test_score_grad_sq_norms_by_hand():
    theta = torch.zeros(2, requires_grad=True)
    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])  # log π(τ_i) = θ·x_i ⇒ g_i = x_i
    norms = score_grad_sq_norms(lambda i: theta @ x[i], [theta], 3)
    assert norms.tolist() == [1.0, 4.0, 2.0]


def test_opob_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 1.0])
    log_w = torch.tensor([0.0, 0.0, math.log(2)])  # w = [1, 1, 2], w² = [1, 1, 4]
    norms = torch.tensor([1.0, 4.0, 2.0])  # W = w²‖g‖² = [1, 4, 8]: b* = (1 + 0 + 8) / 13
    groups = torch.zeros(3, dtype=torch.long)
    b = 9 / 13
    dr = opob_advantages(rewards, log_w, norms, groups, method="drgrpo")
    assert dr.tolist() == pytest.approx([1 - b, -b, 1 - b], rel=1e-6)
    std = math.sqrt(1 / 3)  # rewards [1, 0, 1], Bessel-corrected
    grpo = opob_advantages(rewards, log_w, norms, groups, method="grpo", eps=0.0)
    assert grpo.tolist() == pytest.approx([(1 - b) / std, -b / std, (1 - b) / std], rel=1e-6)
    # a shift of every log-weight in a group changes nothing; a singleton group gets 0
    shifted = opob_advantages(rewards, log_w + 50.0, norms, groups, method="drgrpo")
    assert shifted.tolist() == pytest.approx(dr.tolist(), rel=1e-5)  # float32 log-weights near 50
    alone = opob_advantages(rewards, log_w, norms, torch.tensor([0, 0, 1]), method="drgrpo")
    assert alone[2] == 0.0
    with pytest.raises(ValueError, match="rloo"):
        opob_advantages(rewards, log_w, norms, groups, method="rloo")


def test_ess_warning_fires_after_window_once_per_low_run():
    monitor = EssMonitor(EssWarningConfig(threshold=0.5, window=3, action="stop"))
    fracs = [0.9, 0.4, 0.3, 0.2, 0.1, 0.9, 0.4, float("nan"), 0.2]
    actions = [monitor.update(step, f) for step, f in enumerate(fracs, start=1)]
    assert actions == [None, None, None, "stop", None, None, None, None, "stop"]
    assert monitor.summary() == {"ess_warnings": 2, "ess_warning_steps": [4, 9]}
    assert EssMonitor(EssWarningConfig()).update(1, 0.0) is None  # threshold 0: off


STARVED, FED = 0.5, 0.0  # share of the step the trainer waited for its batch


def test_adaptive_window_reacts_to_an_injected_drop():
    # a starved trainer: W follows the ESS, down on a drop and back up when it recovers
    window = AdaptiveWindow(AdaptiveStalenessConfig(enabled=True, lower_below=0.5, raise_above=0.8), 4, 4)
    seen = [window.update(f, STARVED) for f in [0.9, 0.3, 0.3, 0.3, 0.6, 0.9, 0.9]]
    assert seen == [4, 3, 2, 1, 1, 2, 3]


def test_adaptive_window_shrinks_to_its_floor_while_the_trainer_is_fed():
    cfg = AdaptiveStalenessConfig(enabled=True, lower_below=0.5, raise_above=0.8, min_window=1)
    window = AdaptiveWindow(cfg, 8, 4)
    seen = [window.update(0.95, FED) for _ in range(5)]
    assert seen == [3, 2, 1, 1, 1]  # staleness that buys no throughput is given back
    assert window.update(0.3, FED) == 0  # only a low ESS goes below the floor
    assert [window.update(0.95, STARVED) for _ in range(3)] == [1, 2, 3]
    assert window.update(0.6, STARVED) == 3  # starved, but the ESS is middling: hold


@given(st.integers(0, 16), st.integers(0, 16),
       st.lists(st.tuples(st.one_of(st.floats(0, 1), st.just(float("nan"))), st.floats(0, 1)), max_size=60))
def test_adaptive_window_stays_within_zero_and_k(k, floor, steps):
    window = AdaptiveWindow(AdaptiveStalenessConfig(enabled=True, min_window=floor), k, k)
    assert all(0 <= window.update(ess, wait) <= k for ess, wait in steps)
