"""vespo, dppo / dppo_kl and sapo (docs/objectives.md): hand-worked cases, the reference
implementations they follow, their registry entries, and a golden batch.

Sources followed (the reference transcriptions below are written in the sources' own form):
- vespo: TRL 1.16 ``GRPOTrainer.get_gamma_weights`` and the ``"vespo"`` branch of ``_compute_loss``
  (trl/trainer/grpo_trainer.py), defaults from ``GRPOConfig`` (k_pos 2, λ_pos 3, k_neg 3, λ_neg 2). The
  brief this was written from had k/λ as "2/3 for A >= 0 and 3/2 for A < 0" and "φ(1) = 1 when k = λ":
  TRL's pairs are (k, λ) = (2, 3) and (3, 2), and φ(1) = e^λ · 1 · e^−λ = 1 for every k and λ. TRL
  clamps each token log-ratio to ±20 and log W to [ln 1e−8, 20]; here log W is clamped once to ±20
  (this package's bound). They agree wherever no clamp acts (tested against TRL itself below), i.e.
  unless one token's |log ρ| exceeds 20 or log W < ln 1e−8 (where φ < 1e−14 at the defaults).
- dppo / dppo_kl: verl ``compute_policy_loss_dppo_tv`` / ``compute_policy_loss_dppo_kl``
  (verl/trainer/ppo/core_algos.py, verl-project/verl) and the authors' recipe
  examples/dppo_trainer/run_qwen30b_dppo.sh there: δ = 0.15 (TV), 0.05 (KL), clip_ratio_c = 20 by
  default (the recipe sets 10000 to switch the truncation off), bypass mode (the trust region around
  the rollout policy) recommended. TRL's experimental DPPOTrainer (``_compute_dppo_mask``) has the same
  masks. Difference: 1 − p is computed as −expm1(ℓ) instead of 1 − exp(ℓ) (same formula, exact rounding).
- sapo: verl ``compute_policy_loss_sapo`` and TRL's ``"sapo"`` branch of ``_compute_loss``: gate
  (4/τ)·σ(τ(r − 1)), τ_pos = 1.0 where A > 0, τ_neg = 1.05 otherwise (verl ActorConfig, TRL GRPOConfig);
  the objective is gate · A with the gradient through r (no ℓ factor). verl and TRL aggregate it
  per sequence; here ``agg`` is the caller's, like every loss.

Golden values: data/high_staleness_golden.pt, the losses, gradients and statistics on the proximal
golden batch (prox_golden_cases.py) along the Learner.step path, compared to float32 rounding.
Re-record after an intended change: ``python tests/objectives/test_high_staleness_losses.py --write``.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.objectives import LOSS_PARAMS, LOSSES, PROX_NEVER, PROX_OPTIONAL, validate_loss_params

try:
    from .helpers import all_loss_names, call, from_ratios, make_batch, run, t
    from .prox_golden_cases import build_inputs, close
    from .test_prox_golden import trainer_path
except ImportError:  # run as a script (--write)
    from helpers import all_loss_names, call, from_ratios, make_batch, run, t
    from prox_golden_cases import build_inputs, close
    from test_prox_golden import trainer_path

E = math.exp
NEW_LOSSES = ("vespo", "dppo", "dppo_kl", "sapo")
GOLDEN_PATH = Path(__file__).parent / "data" / "high_staleness_golden.pt"
# name: (loss.name, trainer.prox, loss.params): each loss with its natural proximal policy (the atlas
# arm), and the anchored ones also with the exact proximal policy (verl's non-bypass form)
GOLDEN_PAIRINGS: dict[str, tuple[str, str, dict]] = {
    "vespo": ("vespo", "none", {}),
    "dppo": ("dppo", "none", {}),
    "dppo_kl": ("dppo_kl", "none", {}),
    "sapo": ("sapo", "none", {}),
    "dppo-recompute": ("dppo", "recompute", {}),
    "sapo-recompute": ("sapo", "recompute", {}),
}


def from_probs(probs: list, anchor_probs: list) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp requiring grad, anchor log-probs) of sampled tokens with these probabilities."""
    return torch.log(t(probs)).requires_grad_(), torch.log(t(anchor_probs))


# ---------------------------------------------------------------------------------------------- vespo


def test_vespo_hand_case_weight_one_is_reinforce():
    # ρ = [2, 0.5]: W = 2 · 0.5 = 1, so φ = e^λ · 1 · e^−λ = 1 whatever k and λ: REINFORCE's gradient
    logp, behav = from_ratios([[2.0, 0.5]])
    loss, stats, grad = call("vespo", logp, behav, t([1.5]))
    torch.testing.assert_close(grad, t([[-1.5, -1.5]]) / 2)
    assert loss.item() == pytest.approx(-1.5 * logp.detach().sum().item() / 2, rel=1e-5)
    assert stats["gamma_weight_mean"].item() == pytest.approx(1.0, abs=1e-6)
    assert stats["clipped_tokens"].item() == 0.0 and stats["masked_token_frac"].item() == 0.0


def test_vespo_hand_case_asymmetric_weights():
    # Both rows ρ = [2, 1], W = 2. Row 0, A = +1: (k, λ) = (2, 3), φ = e^3 · 2^2 · e^−6 = 4e^−3.
    # Row 1, A = −1: (k, λ) = (3, 2), φ = e^2 · 2^3 · e^−4 = 8e^−2. J = Σ φ A ℓ / 4.
    logp, behav = from_ratios([[2.0, 1.0], [2.0, 1.0]])
    _, stats, grad = call("vespo", logp, behav, t([1.0, -1.0]))
    phi_pos, phi_neg = 4 * E(-3), 8 * E(-2)
    torch.testing.assert_close(grad, t([[-phi_pos, -phi_pos], [phi_neg, phi_neg]]) / 4)
    assert stats["gamma_weight_min"].item() == pytest.approx(phi_pos, rel=1e-5)
    assert stats["gamma_weight_max"].item() == pytest.approx(phi_neg, rel=1e-5)
    # the peaks: W = k/λ = 2/3 for A > 0 gives φ = e^3 (2/3)^2 e^−2 = e (4/9) ≈ 1.208
    logp_p, behav_p = from_ratios([[2 / 3]])
    _, _, grad_p = call("vespo", logp_p, behav_p, t([1.0]))
    assert -grad_p.item() == pytest.approx(E(1) * 4 / 9, rel=1e-5)


def test_vespo_far_sequence_loses_its_gradient_and_stays_finite():
    # ρ = e^15 per token: log W = 30, clamped to 20; φ = exp(λ + 20k − λ e^20) underflows to 0
    logp, behav = from_ratios([[E(15.0), E(15.0)], [1.0, 1.0]])
    loss, _, grad = call("vespo", logp, behav, t([1.0, 1.0]))
    assert torch.isfinite(loss) and torch.isfinite(grad).all()
    torch.testing.assert_close(grad, t([[0.0, 0.0], [-1.0, -1.0]]) / 4)


def test_vespo_equals_trl_gamma_weights():
    """TRL's own get_gamma_weights (run here, not transcribed) on a batch inside both clamps."""
    grpo = pytest.importorskip("trl.trainer.grpo_trainer")
    g = torch.Generator().manual_seed(7)
    b, t_len = 6, 5
    behav = -3.0 * torch.rand(b, t_len, generator=g) - 0.1
    logp = (behav + 0.4 * torch.randn(b, t_len, generator=g)).requires_grad_()
    mask = torch.rand(b, t_len, generator=g) < 0.8
    mask[:, 0] = True
    adv = torch.randn(b, generator=g)
    phi = grpo.GRPOTrainer.get_gamma_weights(adv[:, None], logp.detach() - behav, mask.float(), None)  # [B, 1]
    # TRL: per-token loss −φ A ℓ, summed over the mask and divided by the token count (its "vespo" branch)
    want = -(phi * adv[:, None] * logp * mask).sum() / mask.sum()
    (want_grad,) = torch.autograd.grad(want, logp)
    loss, _, grad = call("vespo", logp, behav, adv, mask)
    torch.testing.assert_close(loss, want.float(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------------------ dppo (TV)


def test_dppo_tv_hand_case():
    # p_a = π_behav(y), p = π_θ(y) per token; δ = 0.15, C = 20; J = Σ M sg(min(r, C)) A ℓ / 5
    #   t0: 0.5 → 0.7, A = +1: rose by 0.2 > δ on the side A pushes      -> masked
    #   t1: 0.5 → 0.6, A = +1: rose by 0.1                                -> kept, weight r = 1.2
    #   t2: 0.5 → 0.3, A = −1: fell by 0.2 > δ on the side A pushes       -> masked
    #   t3: 0.5 → 0.7, A = −1: rose by 0.2, but A pushes it down          -> kept, weight 1.4
    #   t4: 0.001 → 0.05, A = +1: r = 50 (PPO would clip), moved by 0.049 -> kept, weight min(50, 20) = 20
    logp, behav = from_probs([[0.7, 0.6, 0.3, 0.7, 0.05]], [[0.5, 0.5, 0.5, 0.5, 0.001]])
    adv = t([[1.0, 1.0, -1.0, -1.0, 1.0]])
    loss, stats, grad = call("dppo", logp, behav, adv)
    torch.testing.assert_close(grad, t([[0.0, -1.2, 0.0, 1.4, -20.0]]) / 5)
    lp = logp.detach()[0].tolist()
    assert loss.item() == pytest.approx(-(1.2 * lp[1] - 1.4 * lp[3] + 20.0 * lp[4]) / 5, rel=1e-5)
    assert stats["masked_token_frac"].item() == pytest.approx(2 / 5)
    assert stats["masked_upper_frac"].item() == pytest.approx(1 / 5)
    assert stats["masked_lower_frac"].item() == pytest.approx(1 / 5)
    assert stats["ratio_capped_frac"].item() == pytest.approx(1 / 5)
    assert stats["clipped_tokens"].item() == pytest.approx(3 / 5)  # masked or truncated
    assert stats["divergence_max"].item() == pytest.approx(0.2, rel=1e-5)


def test_dppo_tv_bounds_probability_not_ratio():
    # The paper's motivating pair. A likely token 0.99 → 0.8 with A < 0 has r = 0.81, inside PPO's
    # [0.8, 1.2], yet moved 0.19 > δ in probability: DPPO masks it, PPO keeps it. A rare token
    # 0.001 → 0.01 with A > 0 has r = 10 (PPO clips it) but moved 0.009: DPPO keeps it at weight 10.
    logp, behav = from_probs([[0.8, 0.01]], [[0.99, 0.001]])
    adv = t([[-1.0, 1.0]])
    _, _, grad = call("dppo", logp, behav, adv)
    torch.testing.assert_close(grad, t([[0.0, -10.0]]) / 2, rtol=1e-5, atol=1e-6)
    _, _, grad_ppo = call("ppo", logp, behav, adv)
    torch.testing.assert_close(grad_ppo, t([[0.8 / 0.99, 0.0]]) / 2, rtol=1e-5, atol=1e-6)


def test_dppo_asymmetric_thresholds_and_cap():
    # delta_high = 0.25 lets t0's rise of 0.2 through; ratio_cap = 1.1 truncates t1's and t0's weights
    logp, behav = from_probs([[0.7, 0.6]], [[0.5, 0.5]])
    _, stats, grad = call("dppo", logp, behav, t([[1.0, 1.0]]), delta_high=0.25, ratio_cap=1.1)
    torch.testing.assert_close(grad, t([[-1.1, -1.1]]) / 2)
    assert stats["ratio_capped_frac"].item() == 1.0 and stats["masked_token_frac"].item() == 0.0


def test_dppo_anchors_on_prox_when_given():
    # π_behav = 0.5, π_prox = 0.65, π_θ = 0.7, A > 0: 0.2 above π_behav (masked in the coupled form),
    # 0.05 above π_prox (kept, weight r = 0.7/0.65, in the decoupled form)
    logp, behav = from_probs([[0.7]], [[0.5]])
    _, _, grad = call("dppo", logp, behav, t([1.0]))
    assert grad.item() == 0.0
    _, stats, grad = call("dppo", logp, behav, t([1.0]), prox_logp=torch.log(t([[0.65]])))
    assert grad.item() == pytest.approx(-0.7 / 0.65, rel=1e-5)
    assert stats["ratio_max"].item() == pytest.approx(0.7 / 0.65, rel=1e-5)


# ------------------------------------------------------------------------------------------ dppo (KL)


def _bernoulli_kl(p_anchor: float, p: float) -> float:
    return p_anchor * math.log(p_anchor / p) + (1 - p_anchor) * math.log((1 - p_anchor) / (1 - p))


def test_dppo_kl_hand_case():
    # δ = 0.05 nats. KL(Bern(0.5) ‖ Bern(0.7)) = ½ ln(5/7) + ½ ln(5/3) = 0.0872 > δ;
    # KL(Bern(0.5) ‖ Bern(0.6)) = ½ ln(5/6) + ½ ln(5/4) = 0.0204 <= δ.
    assert _bernoulli_kl(0.5, 0.7) == pytest.approx(0.0872, abs=1e-4)
    assert _bernoulli_kl(0.5, 0.6) == pytest.approx(0.0204, abs=1e-4)
    #   t0: 0.5 → 0.7, A = +1: rose, KL 0.087 > δ -> masked
    #   t1: 0.5 → 0.6, A = +1: rose, KL 0.020     -> kept, weight 1.2
    #   t2: 0.5 → 0.3, A = −1: fell, KL 0.087 > δ -> masked
    #   t3: 0.5 → 0.3, A = +1: fell, but A pushes it up -> kept, weight 0.6
    logp, behav = from_probs([[0.7, 0.6, 0.3, 0.3]], [[0.5, 0.5, 0.5, 0.5]])
    _, stats, grad = call("dppo_kl", logp, behav, t([[1.0, 1.0, -1.0, 1.0]]))
    torch.testing.assert_close(grad, t([[0.0, -1.2, 0.0, -0.6]]) / 4)
    assert stats["masked_upper_frac"].item() == pytest.approx(1 / 4)
    assert stats["masked_lower_frac"].item() == pytest.approx(1 / 4)
    assert stats["divergence_max"].item() == pytest.approx(_bernoulli_kl(0.5, 0.7), rel=1e-4)
    # the TV form with its own δ = 0.15 makes the same decisions on these four tokens
    _, _, grad_tv = call("dppo", logp, behav, t([[1.0, 1.0, -1.0, 1.0]]))
    torch.testing.assert_close(grad_tv, grad)


def test_dppo_kl_is_finite_at_probability_one():
    # p = 1 makes 1 − p = 0: verl's 1e−8 keeps log((1 − p_a)/(1 − p)) finite; the token is masked
    logp = t([[0.0, -0.1]]).requires_grad_()
    behav = t([[-0.05, -0.1]])
    loss, stats, grad = call("dppo_kl", logp, behav, t([[1.0, 1.0]]))
    assert torch.isfinite(loss) and torch.isfinite(grad).all() and torch.isfinite(stats["divergence_max"])
    assert grad[0, 0].item() == 0.0 and grad[0, 1].item() == pytest.approx(-0.5)


def _verl_dppo(logp, old_logp, adv, mask, divergence: str, delta: float, clip_ratio_c: float = 20.0):
    """verl's compute_policy_loss_dppo_{tv,kl} with token-mean aggregation, transcribed in its form."""
    ratio = torch.exp(torch.clamp(logp - old_logp, min=-20.0, max=20.0))
    truncated_ratio = torch.clamp(ratio, max=clip_ratio_c).detach()
    prob, old_prob = torch.exp(logp), torch.exp(old_logp)
    if divergence == "tv":
        valid_pos, valid_neg = (prob - old_prob) <= delta, (prob - old_prob) >= -delta
    else:
        binary_kl = old_prob * (old_logp - logp) + (1 - old_prob) * torch.log(
            (1.0 - old_prob + 1e-8) / (1.0 - prob + 1e-8))
        valid_pos, valid_neg = (binary_kl <= delta) | (prob <= old_prob), (binary_kl <= delta) | (prob >= old_prob)
    valid = torch.where(adv > 0, valid_pos, valid_neg).detach().float()
    pg_losses = -adv * truncated_ratio * logp * valid
    return (pg_losses * mask).sum() / mask.sum()


@pytest.mark.parametrize("name, divergence, delta", [("dppo", "tv", 0.15), ("dppo_kl", "kl", 0.05)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dppo_equals_verl(name, divergence, delta, seed):
    g = torch.Generator().manual_seed(seed)
    old = -4.0 * torch.rand(5, 8, generator=g)
    logp = (old + 0.8 * torch.randn(5, 8, generator=g)).clamp(max=0.0).requires_grad_()
    adv = torch.randn(5, 8, generator=g)
    mask = torch.rand(5, 8, generator=g) < 0.8
    want = _verl_dppo(logp, old, adv, mask.float(), divergence, delta)
    (want_grad,) = torch.autograd.grad(want, logp)
    loss, stats, grad = call(name, logp, old, adv, mask)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-7)
    assert 0.0 < stats["masked_token_frac"].item() < 1.0  # the batch exercises the mask


# ----------------------------------------------------------------------------------------------- sapo


def test_sapo_hand_case_gradient_at_ratio_one_is_the_advantage():
    # r = 1: f = (4/τ) σ(0) = 2/τ, and f'(1) = 4 σ(0)(1 − σ(0)) = 1, so ∂J/∂ℓ = A · r · 1 = A
    logp, behav = from_ratios([[1.0, 1.0]])
    adv = t([[2.0, -3.0]])
    loss, stats, grad = call("sapo", logp, behav, adv)
    torch.testing.assert_close(grad, t([[-2.0, 3.0]]) / 2)
    assert loss.item() == pytest.approx(-(2 / 1.0 * 2.0 + 2 / 1.05 * -3.0) / 2, rel=1e-6)
    assert stats["gate_grad_weight_mean"].item() == pytest.approx(1.0)
    assert stats["clipped_tokens"].item() == 0.0


def test_sapo_hand_case_off_ratio():
    # r = 2, A = +1, τ = 1: f = 4 σ(1) = 2.92423; ∂J/∂ℓ = r · 4 σ(1)(1 − σ(1)) = 8 · 0.196612 = 1.572895.
    # r = 2, A = −1, τ = 1.05: ∂J/∂ℓ = −2 · 4 σ(1.05)(1 − σ(1.05)).
    sig1, sig105 = 1 / (1 + E(-1.0)), 1 / (1 + E(-1.05))
    logp, behav = from_ratios([[2.0, 2.0]])
    loss, stats, grad = call("sapo", logp, behav, t([[1.0, -1.0]]))
    assert 8 * sig1 * (1 - sig1) == pytest.approx(1.572895, rel=1e-6)
    torch.testing.assert_close(grad, t([[-8 * sig1 * (1 - sig1), 8 * sig105 * (1 - sig105)]]) / 2)
    assert loss.item() == pytest.approx(-(4 * sig1 - 4 / 1.05 * sig105) / 2, rel=1e-6)
    assert stats["gate_grad_weight_min"].item() == pytest.approx(8 * sig105 * (1 - sig105), rel=1e-5)


def _trl_sapo(logp, old_logp, adv, mask, tau_pos: float = 1.0, tau_neg: float = 1.05):
    """TRL's "sapo" branch (token importance sampling) with token-mean aggregation, in its form."""
    coef_1 = torch.exp(logp - old_logp)
    temperatures = torch.where(adv > 0, tau_pos, tau_neg)
    soft_coef_1 = torch.sigmoid(temperatures * (coef_1 - 1)) * 4 / temperatures
    per_token_loss = -soft_coef_1 * adv
    return (per_token_loss * mask).sum() / mask.sum()


@pytest.mark.parametrize("seed", [0, 1])
def test_sapo_equals_trl_and_verl(seed):
    batch = make_batch(seed, 5, 6, spread=0.8, token_adv=True, with_prox=False)
    logp, behav, adv, mask = batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"]
    want = _trl_sapo(logp, behav, adv, mask.float())
    (want_grad,) = torch.autograd.grad(want, logp)
    loss, _, grad = call("sapo", logp, behav, adv, mask)
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad, want_grad, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------------- registry and params


def test_registry_entries_declare_what_each_loss_reads():
    assert set(NEW_LOSSES) <= set(all_loss_names())  # so the generic property tests cover them
    assert LOSSES["vespo"].reads_prox == PROX_NEVER  # W = π_θ/π_behav, the whole off-policyness
    for name in ("dppo", "dppo_kl", "sapo"):  # anchored like ppo: π_prox when given, else π_behav
        assert LOSSES[name].reads_prox == PROX_OPTIONAL
    for name in NEW_LOSSES:
        assert LOSSES[name].natural_prox == "none" and LOSSES[name].micro_batch_exact


def test_parameter_defaults():
    expected = {
        "vespo": {"k_pos": 2.0, "lambda_pos": 3.0, "k_neg": 3.0, "lambda_neg": 2.0},
        "dppo": {"delta_low": 0.15, "delta_high": None, "ratio_cap": 20.0},
        "dppo_kl": {"delta_low": 0.05, "delta_high": None, "ratio_cap": 20.0},
        "sapo": {"tau_pos": 1.0, "tau_neg": 1.05},
    }
    for name, params in expected.items():
        assert {k: v for k, v in LOSS_PARAMS[name].items() if k in params} == params, name
        assert LOSS_PARAMS[name]["agg"] == "token_mean"


def test_defaults_are_trls():
    trl = pytest.importorskip("trl")
    defaults = {f.name: f.default for f in dataclasses.fields(trl.GRPOConfig)}
    assert {k: defaults[f"vespo_{k}"] for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")} == {
        k: LOSS_PARAMS["vespo"][k] for k in ("k_pos", "lambda_pos", "k_neg", "lambda_neg")}
    assert (defaults["sapo_temperature_pos"], defaults["sapo_temperature_neg"]) == (
        LOSS_PARAMS["sapo"]["tau_pos"], LOSS_PARAMS["sapo"]["tau_neg"])


@pytest.mark.parametrize("name, params, bad", [
    ("vespo", {"k_pos": -1.0}, "k_pos"),
    ("vespo", {"lambda_neg": 0.0}, "lambda_neg"),
    ("dppo", {"delta_low": -0.1}, "delta_low"),
    ("dppo_kl", {"delta_high": "0.1"}, "delta_high"),
    ("dppo", {"ratio_cap": 0.5}, "ratio_cap"),
    ("sapo", {"tau_pos": 0.0}, "tau_pos"),
    ("sapo", {"tau_neg": float("nan")}, "tau_neg"),
    ("sapo", {"eps_low": 0.2}, "eps_low"),
])
def test_invalid_params_raise_naming_the_param(name, params, bad):
    with pytest.raises(ValueError, match=bad):
        validate_loss_params(name, params)


@pytest.mark.parametrize("name", NEW_LOSSES)
def test_extreme_parameters_stay_finite(name):
    # vespo's φ peaks at e^λ (k/λ)^k e^−k: k = 50, λ = 0.01 would overflow float32 without the cap
    extreme = {"vespo": {"k_pos": 50.0, "lambda_pos": 0.01, "k_neg": 50.0, "lambda_neg": 0.01},
               "dppo": {"delta_low": 0.0, "ratio_cap": 1e30}, "dppo_kl": {"delta_low": 0.0, "ratio_cap": 1e30},
               "sapo": {"tau_pos": 1e-6, "tau_neg": 1e6}}[name]
    batch = make_batch(4, 4, 6, spread=3.0)
    loss, _, grad = run(name, batch, **extreme)
    assert torch.isfinite(loss) and torch.isfinite(grad).all()


# --------------------------------------------------------------------------------------------- golden


@pytest.fixture(scope="module")
def golden() -> dict:
    return torch.load(GOLDEN_PATH)


def test_golden_covers_every_new_loss(golden):
    assert set(golden["cases"]) == set(GOLDEN_PAIRINGS)
    assert {loss for loss, _, _ in GOLDEN_PAIRINGS.values()} == set(NEW_LOSSES)
    # the batch moves the masks and weights: a golden with nothing masked would not pin the mask rule
    for case in ("dppo", "dppo_kl"):
        names, stats = golden["cases"][case]["stat_names"], golden["cases"][case]["stats"]
        masked = stats[:, names.index("masked_token_frac")]
        assert ((masked > 0) & (masked < 1)).all(), case
    names, stats = golden["cases"]["vespo"]["stat_names"], golden["cases"]["vespo"]["stats"]
    assert (stats[:, names.index("gamma_weight_min")] < 0.5).all()


@pytest.mark.parametrize("case", sorted(GOLDEN_PAIRINGS))
def test_pairing_reproduces_the_golden_values(golden, case):
    loss_name, prox, params = GOLDEN_PAIRINGS[case]
    want = golden["cases"][case]
    got = trainer_path(loss_name, prox, params, golden["inputs"])
    assert got["stat_names"] == want["stat_names"]
    for key in ("loss", "grad", "prox_logp", "stats"):
        if want[key] is not None:
            agree, why = close(got[key], want[key])
            assert agree, f"{case}: {key} differs from the golden value: {why}"


def _write() -> None:
    inp = build_inputs()
    golden = {"inputs": inp, "torch": str(torch.__version__), "cpu": torch.backends.cpu.get_cpu_capability(),
              "cases": {name: trainer_path(loss, prox, params, inp)
                        for name, (loss, prox, params) in GOLDEN_PAIRINGS.items()}}
    torch.save(golden, GOLDEN_PATH)


if __name__ == "__main__" and "--write" in sys.argv:
    _write()
