"""VESPO, Variational Sequence-level Soft Policy Optimization (arXiv:2602.10693; TRL ``loss_type="vespo"``;
docs/objectives.md).

    log W_i = Σ_{t∈T_i} (ℓ_it − ℓ_b,it)          (a product of token ratios, no length normalisation)
    φ(W)    = e^λ · W^k · e^(−λW) = exp(λ + k log W − λW)      (detached)
    J_t     = φ(W_i) · A_t · ℓ_t,   (k, λ) = (k_pos, λ_pos) where A_t >= 0, else (k_neg, λ_neg)

φ is a Gamma-shaped weight with φ(1) = 1 for every k and λ: it peaks at W = k/λ and falls to 0 both
for W → 0 (the W^k factor) and for W → ∞ (the e^(−λW) factor), so a sequence far from the behaviour
policy in either direction loses its gradient smoothly instead of at a clip edge. Nothing is clipped
or masked. TRL's defaults: k_pos = 2, λ_pos = 3 (peak at W = 2/3) and k_neg = 3, λ_neg = 2 (peak at
W = 3/2): a positive sample whose probability already rose is damped, as is a negative one whose
probability already fell.

W is against π_behav (``prox_logp`` is not used): TRL multiplies π_θ/π_old by the rollout correction
π_old/π_sampler, i.e. W = π_θ/π_sampler, the whole off-policyness of the sequence, which is what this
loss is meant to bound at high staleness. Differences from TRL: log W is the sum of the unclamped
token log-ratios clamped once to ±20 (this package's bound, as the sequence levels of tis / mis do;
TRL clamps each token to ±20 and the sum to [ln 1e−8, 20]), which differs only where one token's
|log ρ| exceeds 20 or where log W < ln 1e−8 (φ < 1e−14 there at the defaults); and TRL's optional
per-token truncation of π_old/π_sampler has no counterpart.
A sequence is never split by micro-batching, so the loss is micro-batch invariant with global
denominators.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import LOG_RATIO_BOUND, PreparedInputs, aggregate, clamp_log_ratio, seq_sum
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.stats import common_stats


@dataclass(frozen=True, kw_only=True)
class VESPOParams(BaseParams):
    """vespo: k_pos [2.0], lambda_pos [3.0] (A >= 0), k_neg [3.0], lambda_neg [2.0] (A < 0); k >= 0,
    λ > 0 (TRL clamps λ to >= 1e−4 instead)."""

    k_pos: float = 2.0
    lambda_pos: float = 3.0
    k_neg: float = 3.0
    lambda_neg: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("k_pos", self.k_pos, low=0.0)
        check_real("lambda_pos", self.lambda_pos, low=0.0, low_open=True)
        check_real("k_neg", self.k_neg, low=0.0)
        check_real("lambda_neg", self.lambda_neg, low=0.0, low_open=True)


def gamma_weight(log_w: Tensor, k: Tensor | float, lam: Tensor | float) -> Tensor:
    """φ(W) = exp(λ + k log W − λ W), elementwise. log_w: float32 clamped log W (any shape); k, lam:
    broadcastable to it.

    Computed in log space: W^k alone under- or overflows float32 long before φ does. log φ is capped
    at LOG_RATIO_BOUND: φ's peak e^λ (k/λ)^k e^−k exceeds e^20 only for k far above λ (never at the
    defaults, whose peaks are 1.21 and 1.24), and the cap keeps the loss finite there.
    """
    log_phi = lam + k * log_w - lam * torch.exp(log_w)
    return torch.exp(log_phi.clamp(max=LOG_RATIO_BOUND))


def vespo_loss(inp: PreparedInputs, p: VESPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Gamma-weighted REINFORCE on the sequence ratio W. Returns (−J, stats); ``gamma_weight_mean/min/max``
    describe φ over the valid tokens (it is constant on a sequence whose advantage has one sign)."""
    log_rho_d = inp.logp.detach() - inp.behav
    # [B] sequence log-weight, broadcast back over the sequence's tokens: [B, T]
    log_w = clamp_log_ratio(seq_sum(log_rho_d, inp.valid_f))[:, None].expand_as(log_rho_d)
    nonneg = inp.adv >= 0  # TRL picks (k, λ) by the sign of each token's advantage, zero counting as positive
    k = torch.where(nonneg, p.k_pos, p.k_neg)
    lam = torch.where(nonneg, p.lambda_pos, p.lambda_neg)
    phi = gamma_weight(log_w, k, lam)
    loss = -aggregate(phi * inp.adv * inp.logp, inp.valid, inp, p)
    none = torch.zeros_like(inp.valid)  # a soft weight: nothing is clipped, truncated or masked
    stats = common_stats(inp, clamp_log_ratio(inp.logp - inp.behav), none, none)
    stats["gamma_weight_mean"] = inp.tok.mean(phi)
    stats["gamma_weight_min"] = inp.tok.min(phi)
    stats["gamma_weight_max"] = inp.tok.max(phi)
    return loss, stats
