"""Decoupled PPO with the behavior weight truncated (docs/objectives.md, "A-3PO past staleness 8").

    J_t = min(w_t, c) · PPOclip(r_t),   w = π_prox/π_behav (constant),  r = π_θ/π_prox.

With A-3PO's proximal policy (``trainer.prox=loglinear``, the natural one) w = ρ^(1−α) and r = ρ^α,
ρ = π_θ/π_behav: at large staleness the clip on r fades and w carries almost all of ρ, so the
gradient weight w·r is ρ itself on the unclipped branch. Truncating w at c (TIS's min(w, c), here on
the behavior half of ρ) bounds that weight by c(1 + ε_high) where A > 0 and by c·r where A < 0 (add
``dual_clip`` to bound the latter): variance is bounded at any staleness; the bias is the truncated
weight mass, reported as ``behav_truncated_mass``. It is ``decoupled`` (a3po.py) with
``behav_cap=c, behav_cap_mode="clamp"``, registered on its own so that the cap is on by default and
the atlas runs it as an arm.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torch import Tensor

from asyncrl.objectives.a3po import DecoupledParams, decoupled_loss
from asyncrl.objectives.numerics import PreparedInputs
from asyncrl.objectives.params import ClipParams, check_real
from asyncrl.objectives.ppo import required_prox


@dataclass(frozen=True, kw_only=True)
class DecoupledBoundedParams(ClipParams):
    """decoupled_bounded: ClipParams plus behav_cap [2.0] (>= 1), the cap c on w."""

    behav_cap: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("behav_cap", self.behav_cap, low=1.0)


def decoupled_bounded_loss(inp: PreparedInputs, p: DecoupledBoundedParams) -> tuple[Tensor, dict[str, Tensor]]:
    """min(w, c) · PPOclip(π_θ/π_prox) over [B, T] tokens: a3po.decoupled_loss with the cap clamped.
    Returns (−J, stats)."""
    required_prox(inp, "decoupled_bounded")  # the error names this loss, not the one it delegates to
    same = {f.name: getattr(p, f.name) for f in dataclasses.fields(p)}
    loss, stats = decoupled_loss(inp, DecoupledParams(**same, behav_cap_mode="clamp"))
    # the share of the behavior weight's mass the cap removed: the bias it buys its bound with
    stats["behav_truncated_mass"] = 1.0 - stats["applied_weight_mean"] / stats["behav_weight_mean"]
    return loss, stats
