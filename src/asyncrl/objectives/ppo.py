"""PPO clipped surrogate (coupled) and the clip every PPO-style loss shares (docs/objectives.md).

- ppo (Schulman et al. 2017, arXiv:1707.06347; asymmetric clip from DAPO, dual clip from Ye et al.
  2019, arXiv:1912.09729): J_t = min(r A, clip(r, 1−ε_low, 1+ε_high) A), and where A < 0 also
  max(J_t, c A); r = π_θ/π_anchor with anchor π_prox when ``prox_logp`` is given, else π_behav. No
  behavior weight (AReaL HEAD's "decoupled" without rejection sampling is this loss with a prox anchor).
- decoupled PPO (w · PPOclip(π_θ/π_prox), w = π_prox/π_behav) and A-3PO's proximal policy are in
  a3po.py, read in one file.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import ClipParams
from asyncrl.objectives.stats import clip_stats, common_stats


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
