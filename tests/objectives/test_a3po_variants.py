"""A-3PO variants that keep a trust region without a forward pass (docs/objectives.md, "A-3PO past
staleness 8"): hand-worked tiny cases and equivalences with the losses they extend."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.objectives import PROX_STRATEGIES, approximate_prox_logp, natural_prox, policy_loss
from asyncrl.objectives.prox.loglinear_ess import LogLinearESS, ess_alpha_floor
from asyncrl.objectives.prox.loglinear_floor import LogLinearFloor

from .helpers import make_batch, run, t

VARIANT_STRATEGIES = ("loglinear_floor", "loglinear_ess")
VARIANT_LOSSES = ("decoupled_bounded", "a3po_seq")


def test_variants_need_no_forward_pass_and_losses_default_to_a3po():
    for name in VARIANT_STRATEGIES:
        strategy = PROX_STRATEGIES[name]
        assert strategy.gives_prox and not strategy.needs_forward and strategy.approximate
    assert all(natural_prox(name) == "loglinear" for name in VARIANT_LOSSES)


def test_loglinear_floor_hand_case():
    """V = 16, versions [0, 12, 15] → d = [16, 4, 1], A-3PO α = [1/16, 1/4, 1]; α_min = 1/4 gives
    α = [1/4, 1/4, 1]. ℓ_b = [−1, −2, −1], ℓ = [−0.5, −1, −3]:
    log π_prox = [0.25·(−1) + 0.75·(−0.5), 0.25·(−2) + 0.75·(−1), −1] = [−0.625, −1.25, −1]
    (A-3PO's first entry: −1/16 − 15/32 = −0.53125)."""
    behav, logp = t([[-1.0, -2.0, -1.0]]), t([[-0.5, -1.0, -3.0]])
    versions = torch.tensor([[0, 12, 15]])
    out = PROX_STRATEGIES["loglinear_floor"].plan(behav, versions, 16).minibatch(0, 1, behav, logp, versions)
    assert torch.equal(out, t([[-0.625, -1.25, -1.0]]))
    a3po = approximate_prox_logp("loglinear", behav, logp, versions, 16)
    assert torch.equal(a3po, t([[-0.53125, -1.25, -1.0]]))
    # at d <= 1 / α_min the floor is A-3PO exactly
    assert torch.equal(approximate_prox_logp("loglinear_floor", behav[:, 1:], logp[:, 1:], versions[:, 1:], 16),
                       a3po[:, 1:])
    with pytest.raises(ValueError, match="^alpha_min"):
        LogLinearFloor(alpha_min=0.0)


def _ess_case():
    """Two tokens at d = 4 (α = 1/4) with log ρ = [0, 4 ln 2] and a padded third (v = −1)."""
    behav = t([[-3.0, -3.0, 0.0]])
    logp = t([[-3.0, -3.0 + 4 * math.log(2.0), -7.0]])
    versions = torch.tensor([[12, 12, -1]])
    return behav, logp, versions


def test_ess_floor_hand_case():
    """w(a) = [1, y], y = 16^(1−a). ESS = (1 + y)² / (2 (1 + y²)) >= 0.9 ⇔ y² − 2.5 y + 1 <= 0 ⇔
    y ∈ [1/2, 2], so a* = 3/4 (16^(1/4) = 2); plain A-3PO (a = 1/4, y = 8) has ESS 81/130 = 0.623.
    At a* = 3/4: log π_prox = 0.75 ℓ_b + 0.25 ℓ = [−3, −3 + ln 2] (w = 2, r = ρ^(3/4) = 8), and ℓ_b
    (α = 1) on the padded token. With target 0.5 (<= 0.623) the floor stays at 1/4: A-3PO."""
    behav, logp, versions = _ess_case()
    alpha = torch.full((1, 3), 0.25)
    valid = versions >= 0
    floor = ess_alpha_floor(logp - behav, alpha, valid, 0.9)
    assert floor.item() >= 0.75 and floor.item() == pytest.approx(0.75, abs=1e-6)
    out = LogLinearESS(ess_target=0.9).plan(behav, versions, 16).minibatch(0, 1, behav, logp, versions)
    torch.testing.assert_close(out, t([[-3.0, -3.0 + math.log(2.0), 0.0]]), rtol=0, atol=1e-5)
    assert ess_alpha_floor(logp - behav, alpha, valid, 0.5).item() == 0.25
    assert torch.equal(LogLinearESS(ess_target=0.5).plan(behav, versions, 16).minibatch(0, 1, behav, logp, versions),
                       approximate_prox_logp("loglinear", behav, logp, versions, 16))
    with pytest.raises(ValueError, match="^ess_target"):
        LogLinearESS(ess_target=1.5)


@pytest.mark.parametrize("target", [0.3, 0.6, 0.9])
def test_ess_floor_meets_its_target_on_random_batches(target):
    batch = make_batch(3, 6, 9, spread=2.0)
    behav, logp, versions = batch["behav_logp"], batch["logp"].detach(), batch["versions"]
    ess = LogLinearESS(ess_target=target)  # staleness 16..20
    prox = ess.plan(behav, versions, 20).minibatch(0, 6, behav, logp, versions)
    valid = versions >= 0
    w = torch.exp(prox - behav)[valid]
    assert (w.sum() ** 2 / (len(w) * (w * w).sum())).item() >= target - 1e-5
    plain = approximate_prox_logp("loglinear", behav, logp, versions, 20)
    w_plain = torch.exp(plain - behav)[valid]
    if (w_plain.sum() ** 2 / (len(w_plain) * (w_plain * w_plain).sum())).item() >= target:
        assert torch.equal(prox, plain)


def test_decoupled_bounded_hand_case():
    """Token 1: A = 1, w = 4 → min(w, 2) = 2, r = 1 (unclipped): J = 2, ∂J/∂ℓ = 2.
    Token 2: A = −1, w = 1/2, r = 1.5 (A < 0, r > 1 − ε: unclipped): J = −0.75, ∂J/∂ℓ = −0.75.
    token_mean: loss = −(2 − 0.75)/2 = −0.625, grad = [−1, 0.375]; truncated mass = 1 − 1.25/2.25 = 4/9."""
    behav = t([[-2.0, -1.0]])
    prox = behav + t([[math.log(4.0), math.log(0.5)]])
    logp = (prox + t([[0.0, math.log(1.5)]])).requires_grad_()
    adv = t([[1.0, -1.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    loss, stats = policy_loss("decoupled_bounded", logp, behav, adv, mask, prox_logp=prox, behav_cap=2.0)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(loss, torch.tensor(-0.625), rtol=0, atol=1e-6)
    torch.testing.assert_close(grad, t([[-1.0, 0.375]]), rtol=0, atol=1e-6)
    assert stats["behav_capped_frac"].item() == 0.5
    assert stats["behav_truncated_mass"].item() == pytest.approx(4 / 9, abs=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_decoupled_bounded_is_decoupled_with_a_clamped_cap(seed):
    batch = make_batch(seed, 5, 6, spread=1.5)
    loss, stats, grad = run("decoupled_bounded", batch, behav_cap=1.5, dual_clip=3.0)
    ref_loss, ref_stats, ref_grad = run("decoupled", batch, behav_cap=1.5, behav_cap_mode="clamp", dual_clip=3.0)
    assert torch.equal(loss, ref_loss) and torch.equal(grad, ref_grad)
    assert all(torch.equal(stats[k], ref_stats[k]) for k in ref_stats)


def test_a3po_seq_hand_case():
    """Sequence 0: log w = mean(0.5, 0) = 0.25, log s = mean(2e-4, 0) = 1e-4 (inside [1 − 3e-4, 1 + 4e-4]),
    Â = 1: J_0 = e^0.2501, each token's ∂J_0/∂ℓ_t = J_0/2. Sequence 1: w = 1, log s = 1e-3 > log(1.0004),
    Â = 1: clipped, J_1 = 1.0004, no gradient. token_mean over 4 tokens (each carries its J_i):
    loss = −(2 J_0 + 2 J_1)/4, ∂loss/∂ℓ_0t = −2 · (J_0/2)/4 = −J_0/4. With behav_cap = 1.1: J_0 = 1.1 e^1e-4."""
    behav = t([[-2.0, -2.0], [-1.0, -1.0]])
    prox = t([[-1.5, -2.0], [-1.0, -1.0]])
    logp = (prox + t([[2e-4, 0.0], [2e-3, 0.0]])).requires_grad_()
    adv, mask = t([1.0, 1.0]), torch.ones(2, 2, dtype=torch.bool)
    j0 = math.exp(0.2501)
    for cap, j in ((None, j0), (1.1, 1.1 * math.exp(1e-4))):
        loss, stats = policy_loss("a3po_seq", logp, behav, adv, mask, prox_logp=prox, behav_cap=cap)
        (grad,) = torch.autograd.grad(loss, logp)
        torch.testing.assert_close(loss, torch.tensor(-(j + 1.0004) / 2), rtol=0, atol=1e-5)
        torch.testing.assert_close(grad, t([[-j / 4, -j / 4], [0.0, 0.0]]), rtol=0, atol=1e-5)
        assert stats["seq_clipfrac"].item() == 0.5
        assert stats["seq_behav_capped_frac"].item() == (0.0 if cap is None else 0.5)


@pytest.mark.parametrize("seed", [0, 1])
def test_a3po_seq_with_prox_at_behav_is_gspo(seed):
    """w_i = 1 when π_prox = π_behav: the loss is GSPO anchored at π_prox."""
    batch = make_batch(seed, 4, 5, spread=0.01)
    batch["prox_logp"] = batch["behav_logp"].clone()
    loss, _, grad = run("a3po_seq", batch)
    ref_loss, _, ref_grad = run("gspo", batch)
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-6, atol=1e-7)


def test_a3po_seq_with_loglinear_prox_is_a3po_on_the_sequence_mean_log_ratio():
    """One staleness d = 8 per sequence: s_i = ρ̄_i^(1/8), w_i = ρ̄_i^(7/8), ρ̄_i = exp(mean_t log ρ_it)."""
    batch = make_batch(5, 3, 4, spread=0.3, mask_p=1.1)
    behav, logp = batch["behav_logp"], batch["logp"].detach()
    versions = torch.full((3, 4), 2)
    prox = approximate_prox_logp("loglinear", behav, logp, versions, 10)
    _, stats = policy_loss("a3po_seq", logp, behav, batch["advantages"], batch["loss_mask"], prox_logp=prox)
    mean_log_rho = (logp - behav).mean(-1)
    torch.testing.assert_close(stats["seq_ratio_max"], (mean_log_rho.max() / 8).exp(), rtol=1e-5, atol=0)
    torch.testing.assert_close(stats["seq_behav_weight_max"], (mean_log_rho.max() * 7 / 8).exp(), rtol=1e-5, atol=0)


def test_prox_params_build_the_strategy_and_bad_ones_name_the_parameter():
    from asyncrl.config import load_config
    from asyncrl.core.loader import ConfigError
    from asyncrl.objectives import prox_strategy
    from asyncrl.runtime.validate import load_run_config

    assert prox_strategy("loglinear_floor", {"alpha_min": 0.5}).alpha_min == 0.5
    assert prox_strategy("loglinear_floor").alpha_min == 0.25  # the registered default
    assert prox_strategy("loglinear_ess", {"ess_target": 0.7}).ess_target == 0.7
    cfg = load_config(None, ["trainer.prox=loglinear_floor", "trainer.prox_params.alpha_min=0.125"])
    assert cfg.trainer.prox_params == {"alpha_min": 0.125}
    for overrides, match in [
        (["trainer.prox=loglinear_floor", "trainer.prox_params.alpha_min=2"], r"trainer\.prox_params\.alpha_min=2"),
        (["trainer.prox=loglinear_floor", "trainer.prox_params.alpah=0.1"], r"prox_params\.alpah: .*known: alpha_min"),
        (["trainer.prox_params.alpha_min=0.1"], r"prox_params\.alpha_min: not a parameter of .*'loglinear'"),
    ]:
        with pytest.raises(ConfigError, match=match):  # the loss's parameters: checked for the run
            load_run_config(None, overrides)
