"""PPO clipped surrogate (coupled) and decoupled PPO (docs/objectives.md).

- ppo (Schulman et al. 2017, arXiv:1707.06347; asymmetric clip from DAPO, dual clip from Ye et al.
  2019, arXiv:1912.09729): J_t = min(r A, clip(r, 1−ε_low, 1+ε_high) A), and where A < 0 also
  max(J_t, c A); r = π_θ/π_anchor with anchor π_prox when ``prox_logp`` is given, else π_behav. No
  behavior weight (AReaL HEAD's "decoupled" without rejection sampling is this loss with a prox anchor).
- decoupled (Hilton et al. 2021, arXiv:2110.00641): J_t = w_t · PPOclip(r_t), w = π_prox/π_behav
  (constant), r = π_θ/π_prox. π_prox comes from the caller (a proximal strategy, asyncrl.objectives.prox:
  A-3PO's loglinear one makes this loss A-3PO); without ``prox_logp``, ValueError. Optional
  behavior-weight cap: "mask" drops tokens with w > cap (AReaL's ``behav_imp_weight_cap``), "clamp"
  uses min(w, cap) (= TIS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, Reducer, aggregate, clamp_log_ratio
from asyncrl.objectives.params import ClipParams, check_choice, check_real
from asyncrl.objectives.stats import behav_weight_stats, clip_stats, common_stats


@dataclass(frozen=True)
class ClipResult:
    """Per-token clipped surrogate, all [B, T].

    objective: float32 J_t to maximize (gradient A r ∇ℓ on the unclipped branch, 0 on a clipped one).
    upper: bool, A > 0 and r > 1 + ε_high. lower: bool, A < 0 and r < 1 − ε_low. dual: bool, A < 0 and
    r > c. These are exactly the tokens where the clipped branch has a strictly larger loss (verl).
    """

    objective: Tensor
    upper: Tensor
    lower: Tensor
    dual: Tensor

    @property
    def clipped(self) -> Tensor:
        """[B, T] bool, any clip branch active."""
        return self.upper | self.lower | self.dual


def clipped_surrogate(
    log_r: Tensor, adv: Tensor, eps_low: float | Tensor, eps_high: float | Tensor, dual_clip: float | None = None
) -> ClipResult:
    """PPO's min(r A, clip(r) A) (+ dual clip) written as explicit branches.

    log_r: [B, T] float32 clamped log-ratio, carries the gradient. adv: [B, T] float32, detached.
    eps_low / eps_high: floats or 0-dim tensors (M2PO's official variant derives them per batch).
    The explicit ``where`` form equals the min/max form value for value (see docs/objectives.md) and
    avoids torch.minimum's tie rule, which splits the gradient between two equal branches.
    """
    r = torch.exp(log_r)
    r_d = r.detach()
    upper = (adv > 0) & (r_d > 1.0 + eps_high)
    lower = (adv < 0) & (r_d < 1.0 - eps_low)
    obj = torch.where(upper, (1.0 + eps_high) * adv, r * adv)
    obj = torch.where(lower, (1.0 - eps_low) * adv, obj)
    if dual_clip is None:
        dual = torch.zeros_like(upper)
    else:
        dual = (adv < 0) & (r_d > dual_clip)
        obj = torch.where(dual, dual_clip * adv, obj)
    return ClipResult(objective=obj, upper=upper, lower=lower, dual=dual)


def anchor_logp(inp: PreparedInputs) -> Tensor:
    """log π_anchor: π_prox when given, else π_behav (coupled)."""
    return inp.behav if inp.prox is None else inp.prox


def required_prox(inp: PreparedInputs, loss_name: str) -> Tensor:
    """π_prox for a loss built on it; ValueError when the caller gave none (no silent fallback)."""
    if inp.prox is None:
        raise ValueError(f"loss {loss_name!r} needs prox_logp, the proximal policy's log-probs "
                         "(asyncrl.objectives.prox: recompute, loglinear = A-3PO, linear, behav)")
    return inp.prox


@dataclass(frozen=True, kw_only=True)
class PPOParams(ClipParams):
    """ppo: eps_low [0.2], eps_high [= eps_low], dual_clip [None], plus the aggregation parameters."""


def ppo_loss(inp: PreparedInputs, p: PPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Coupled clipped surrogate against π_prox (if given) or π_behav. Returns (−J, stats)."""
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    loss = -aggregate(clip.objective, inp.valid, inp, p)
    stats = common_stats(inp, log_r, clip.clipped, torch.zeros_like(inp.valid))
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    return loss, stats


@dataclass(frozen=True, kw_only=True)
class DecoupledParams(ClipParams):
    """decoupled: ClipParams plus behav_cap [None] (>= 1) and behav_cap_mode ["mask" | "clamp"]."""

    behav_cap: float | None = None
    behav_cap_mode: str = "mask"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("behav_cap", self.behav_cap, low=1.0, allow_none=True)
        check_choice("behav_cap_mode", self.behav_cap_mode, ("mask", "clamp"))


def decoupled_loss(inp: PreparedInputs, p: DecoupledParams) -> tuple[Tensor, dict[str, Tensor]]:
    """w · PPOclip(π_θ/π_prox) with an optional cap on w. Returns (−J, stats)."""
    prox = required_prox(inp, "decoupled")
    log_w = clamp_log_ratio(prox - inp.behav)
    log_r = clamp_log_ratio(inp.logp - prox)
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    kept = inp.valid
    if p.behav_cap is None:
        over_cap = torch.zeros_like(kept)
        weight = torch.exp(log_w)
    else:
        log_cap = math.log(p.behav_cap)
        over_cap = inp.valid & (log_w > log_cap)
        if p.behav_cap_mode == "mask":
            kept = inp.valid & ~over_cap
            weight = torch.exp(log_w)
        else:
            weight = torch.exp(log_w.clamp(max=log_cap))
    loss = -aggregate(weight * clip.objective, kept, inp, p)
    masked = over_cap if p.behav_cap_mode == "mask" else torch.zeros_like(over_cap)
    stats = common_stats(inp, log_r, clip.clipped | over_cap, masked)
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats.update(behav_weight_stats(inp, log_w))
    stats["behav_capped_frac"] = inp.tok.frac(over_cap)
    stats["applied_weight_mean"] = Reducer(kept).mean(weight.detach())
    return loss, stats
