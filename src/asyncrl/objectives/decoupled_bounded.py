"""Decoupled PPO with the behavior weight truncated (docs/objectives.md, "A-3PO past staleness 8").

    J_t = min(w_t, c) · PPOclip(r_t),   w = π_prox/π_behav (constant),  r = π_θ/π_prox.

With A-3PO's proximal policy (``trainer.prox=loglinear``, the natural one) w = ρ^(1−α) and r = ρ^α,
ρ = π_θ/π_behav: at large staleness the clip on r fades and w carries almost all of ρ, so the
gradient weight w·r is ρ itself on the unclipped branch. Truncating w at c (TIS's min(w, c), here on
the behavior half of ρ) bounds that weight by c(1 + ε_high) where A > 0 and by c·r where A < 0 (add
``dual_clip`` to bound the latter): variance is bounded at any staleness; the bias is the truncated
weight mass, reported as ``behav_truncated_mass``. The same values as ``decoupled`` with
``behav_cap=c, behav_cap_mode="clamp"``; registered on its own so that the cap is on by default and
the atlas runs it as an arm.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import ClipParams, check_real
from asyncrl.objectives.ppo import clipped_surrogate, required_prox
from asyncrl.objectives.stats import behav_weight_stats, clip_stats, common_stats


@dataclass(frozen=True, kw_only=True)
class DecoupledBoundedParams(ClipParams):
    """decoupled_bounded: ClipParams plus behav_cap [2.0] (>= 1), the cap c on w."""

    behav_cap: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("behav_cap", self.behav_cap, low=1.0)


def decoupled_bounded_loss(inp: PreparedInputs, p: DecoupledBoundedParams) -> tuple[Tensor, dict[str, Tensor]]:
    """min(w, c) · PPOclip(π_θ/π_prox) over [B, T] tokens. Returns (−J, stats)."""
    prox = required_prox(inp, "decoupled_bounded")
    log_w = clamp_log_ratio(prox - inp.behav)
    log_cap = math.log(p.behav_cap)
    over_cap = inp.valid & (log_w > log_cap)
    weight = torch.exp(log_w.clamp(max=log_cap))
    log_r = clamp_log_ratio(inp.logp - prox)
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    loss = -aggregate(weight * clip.objective, inp.valid, inp, p)
    stats = common_stats(inp, log_r, clip.clipped | over_cap, torch.zeros_like(over_cap))
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats.update(behav_weight_stats(inp, log_w))
    stats["behav_capped_frac"] = inp.tok.frac(over_cap)
    stats["applied_weight_mean"] = inp.tok.mean(weight.detach())
    # the share of the behavior weight's mass the cap removed: the bias it buys its bound with
    stats["behav_truncated_mass"] = 1.0 - stats["applied_weight_mean"] / inp.tok.mean(torch.exp(log_w))
    return loss, stats
