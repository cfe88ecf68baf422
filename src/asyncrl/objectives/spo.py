"""SPO, Simple Policy Optimization (Xie et al. 2025): a squared-TV penalty instead of a clip.

    J_t = r_t A_t − |A_t| / (2ε) · (r_t − 1)²,   r = π_θ/π_anchor (π_prox when given, else π_behav)

Per sample the objective is a concave parabola in r with its maximum at r = 1 + ε·sign(A): the
penalty pulls the ratio back towards the trust region [1 − ε, 1 + ε] with a gradient that grows
with the distance, where PPO's clip only switches the gradient off. Nothing is clipped or masked.
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
class SPOParams(BaseParams):
    """spo: eps [0.2] > 0, the ratio distance at which the penalty balances the advantage."""

    eps: float = 0.2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("eps", self.eps, low=0.0, low_open=True)


def spo_loss(inp: PreparedInputs, p: SPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """r A − |A| (r − 1)² / (2ε). Returns (−J, stats)."""
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    r = torch.exp(log_r)
    objective = r * inp.adv - inp.adv.abs() / (2.0 * p.eps) * (r - 1.0) ** 2
    loss = -aggregate(objective, inp.valid, inp, p)
    none = torch.zeros_like(inp.valid)
    stats = common_stats(inp, log_r, none, none)
    # Samples past the penalty's optimum 1 ± ε, where the gradient already points back.
    stats["beyond_trust_frac"] = inp.tok.frac((r.detach() - 1.0).abs() > p.eps)
    return loss, stats
