"""SAPO, Soft Adaptive Policy Optimization (Qwen, arXiv:2511.20347; verl ``sapo``, TRL ``loss_type="sapo"``;
docs/objectives.md).

    f_τ(r) = (4/τ) · σ(τ (r − 1)),   τ = τ_pos where A > 0, else τ_neg
    J_t    = f_τ(r_t) · A_t,          r = π_θ/π_anchor (π_prox when given, else π_behav)

PPO's clip replaced by a smooth gate: the gradient is A · r · 4σ(1 − σ) ∇ℓ = A · r · sech²(τ(r − 1)/2)
∇ℓ, exactly A ∇ℓ at r = 1 (the factor 4/τ makes the slope of f at r = 1 equal to 1), and it decays
smoothly as r leaves 1 instead of dropping to 0 at a clip edge; the larger τ, the faster. τ_neg > τ_pos
(1.05 against 1.0 in the paper, verl and TRL) damps negative-advantage tokens a little harder, since
pushing down a token spreads probability over the whole vocabulary. Nothing is clipped or masked.

The anchor follows ppo: both reference implementations take r against their ``old_log_prob`` (the
recomputed proximal policy in verl, π_old in TRL) and against the rollout policy without one, which
here is ``prox_logp`` when given, else π_behav. verl and TRL aggregate SAPO per sequence
(``agg="seq_mean_token_mean"``); the default ``agg`` here is "token_mean" like every other loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.ppo import anchor_logp
from asyncrl.objectives.stats import common_stats


@dataclass(frozen=True, kw_only=True)
class SAPOParams(BaseParams):
    """sapo: tau_pos [1.0] > 0 (A > 0), tau_neg [1.05] > 0 (A <= 0), the gate temperatures."""

    tau_pos: float = 1.0
    tau_neg: float = 1.05

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("tau_pos", self.tau_pos, low=0.0, low_open=True)
        check_real("tau_neg", self.tau_neg, low=0.0, low_open=True)


def sapo_loss(inp: PreparedInputs, p: SAPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Soft-gated surrogate. Returns (−J, stats); ``gate_grad_weight_mean/min`` describe the factor
    r · 4σ(1 − σ) that multiplies A ∇ℓ (1 at r = 1; PPO's counterpart is r or 0)."""
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    r = torch.exp(log_r)
    tau = torch.where(inp.adv > 0, p.tau_pos, p.tau_neg)  # verl and TRL: a zero advantage takes τ_neg
    gate = torch.sigmoid(tau * (r - 1.0))
    loss = -aggregate((4.0 / tau) * gate * inp.adv, inp.valid, inp, p)
    none = torch.zeros_like(inp.valid)  # a soft gate: nothing is clipped or masked
    stats = common_stats(inp, log_r, none, none)
    with torch.no_grad():
        grad_weight = r * 4.0 * gate * (1.0 - gate)
        stats["gate_grad_weight_mean"] = inp.tok.mean(grad_weight)
        stats["gate_grad_weight_min"] = inp.tok.min(grad_weight)
    return loss, stats
