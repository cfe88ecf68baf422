"""Vanilla REINFORCE / policy gradient (Williams 1992): J_t = A_t · ℓ_t, gradient A ∇ℓ.

No importance weight, no clipping: correct only for on-policy data, and the reference the other
losses reduce to when π_θ = π_behav (= π_prox). behav_logp / prox_logp feed only the diagnostics
(ratio_* and approx_kl_* are against π_behav).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams
from asyncrl.objectives.stats import common_stats


@dataclass(frozen=True, kw_only=True)
class REINFORCEParams(BaseParams):
    """reinforce: only the aggregation parameters."""


def reinforce_loss(inp: PreparedInputs, p: REINFORCEParams) -> tuple[Tensor, dict[str, Tensor]]:
    """−mean A ℓ. Returns (loss, stats)."""
    loss = -aggregate(inp.adv * inp.logp, inp.valid, inp, p)
    none = torch.zeros_like(inp.valid)
    stats = common_stats(inp, clamp_log_ratio(inp.logp - inp.behav), none, none)
    return loss, stats
