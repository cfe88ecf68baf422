"""CISPO (MiniMax-M1, arXiv:2506.13585; docs/objectives.md).

    J_t = sg(clip(r_t, cap_low, cap_high)) · A_t · ℓ_t,   r = π_θ/π_anchor (π_prox if given, else π_behav)

Every token keeps a gradient r̂ A ∇ℓ: clipping shrinks it instead of zeroing it (contrast with PPO).
The cap is absolute (TRL's ε_max = 5.0, no lower cap by default), not verl's [1 − ε, 1 + ε] reuse of
the PPO clip range, which is far tighter than the paper's intent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.ppo import anchor_logp
from asyncrl.objectives.stats import common_stats


@dataclass(frozen=True, kw_only=True)
class CISPOParams(BaseParams):
    """cispo: cap_high [5.0] (>= 1), cap_low [None] (in [0, 1]; None = no lower cap)."""

    cap_high: float = 5.0
    cap_low: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("cap_high", self.cap_high, low=1.0)
        check_real("cap_low", self.cap_low, low=0.0, high=1.0, allow_none=True)


def cispo_loss(inp: PreparedInputs, p: CISPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped-IS-weight REINFORCE. Returns (−J, stats)."""
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    log_r_d = log_r.detach()
    log_high = math.log(p.cap_high)
    log_low = float("-inf") if not p.cap_low else math.log(p.cap_low)
    upper = inp.valid & (log_r_d > log_high)
    lower = inp.valid & (log_r_d < log_low)
    weight = torch.exp(log_r_d.clamp(min=log_low, max=log_high))
    loss = -aggregate(weight * inp.adv * inp.logp, inp.valid, inp, p)
    stats = common_stats(inp, log_r, upper | lower, torch.zeros_like(upper))
    stats["clipfrac_upper"] = inp.tok.frac(upper)
    stats["clipfrac_lower"] = inp.tok.frac(lower)
    stats["applied_weight_mean"] = inp.tok.mean(weight)
    return loss, stats
