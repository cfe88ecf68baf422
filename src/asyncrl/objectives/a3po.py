"""A-3PO in one file (arXiv:2512.06547): decoupled PPO whose proximal policy costs no forward pass.

The problem. An asynchronous trainer learns from tokens that older weights generated. Decoupled PPO
(Hilton et al. 2021, arXiv:2110.00641) keeps apart two policies that plain PPO merges: the behavior
policy π_behav that sampled the token (its log-prob ℓ_b is recorded at generation) and the proximal
policy π_prox, the centre of the trust region. Exact decoupled PPO takes π_prox = the trained weights
at the start of the step, which costs one extra forward pass over the batch. A-3PO interpolates π_prox
instead, in log space, between π_behav and the current policy π_θ (log-prob ℓ; sg = stop-gradient):

    log π_prox = α ℓ_b + (1 − α) sg(ℓ),   α_t = 1/d_t if d_t >= 1,   α_t = 1 if d_t <= 0 or v_t < 0.

Staleness d_t = V − v_t: V is the version of the trained weights at the start of the step, v_t the
version that generated token t (−1 for a token not generated). A fresh (d = 0) or one-step-stale
(d = 1) token gets π_prox = π_behav exactly: plain PPO against the behavior policy (A-3PO's text and
AReaL's code; the paper's Listing 1 would give π_θ at d = 0, which silently removes the trust region).
d < 0 (a future version: a bug or clock skew) is treated as d = 0; ``staleness_stats`` counts it.

The loss, per valid token, maximised (the function returns −J aggregated over tokens):

    J_t = w_t · PPOclip(r_t, A_t),   r = π_θ/π_prox (carries the gradient),   w = π_prox/π_behav (constant),
    PPOclip(r, A) = min(r A, clip(r, 1 − ε_low, 1 + ε_high) A), and where A < 0 also max(that, c A).

r is the trust-region ratio, anchored at π_prox; w is the behavior weight that corrects for sampling
from π_behav. With ρ = π_θ/π_behav: r = ρ^α, w = ρ^(1−α), w·r = ρ, so α decides only where the clip
acts (ρ outside [(1−ε_low)^(1/α), (1+ε_high)^(1/α)]). The optional cap on w (``behav_cap``) either
drops tokens with w > cap ("mask", AReaL's ``behav_imp_weight_cap``) or uses min(w, cap) ("clamp", TIS).

How a training step runs it: ``loglinear_plan`` once per step (α ℓ_b and 1 − α depend only on the
batch), ``apply_loglinear`` per minibatch update (one fused multiply-add: the point of A-3PO is that
π_prox costs nothing next to a forward pass), then ``decoupled_loss``. The strategy class the trainer
calls is ``LogLinear`` in prox/loglinear.py; the loss is registered as ``decoupled``.

Statistics (names in stats.py): COMMON_STATS with r as the ratio; clipfrac_upper / clipfrac_lower /
dual_clipfrac; behav_weight_mean/min/max (w over valid tokens, before the cap) and behav_kl_k1 =
mean(ℓ_b − log π_prox); behav_capped_frac (valid tokens with w > cap); applied_weight_mean (the
weight actually applied, over the tokens kept). ``*_max`` / ``*_min`` are the max / min of this call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, Reducer, aggregate, clamp_log_ratio
from asyncrl.objectives.params import ClipParams, check_choice, check_real
from asyncrl.objectives.ppo import clipped_surrogate, required_prox
from asyncrl.objectives.stats import behav_weight_stats, clip_stats, common_stats

# --- the proximal policy --------------------------------------------------------------------------


def staleness_alpha(versions: Tensor, current_version: int | Tensor) -> Tensor:
    """[B, T] float32 α_t, the weight on the behavior policy; the only place it is computed.

    versions: [B, T] integer; current_version: int or 0-dim integer tensor.
    """
    staleness = current_version - versions.long()
    # d <= 0 and d = 1 both give 1/1: fresh tokens (and future versions) are anchored at π_behav
    alpha = 1.0 / staleness.clamp(min=1).float()
    # a token no policy generated (v = −1) has no staleness: also anchored at π_behav
    return torch.where(versions < 0, 1.0, alpha)


def loglinear_plan(behav_logp: Tensor, versions: Tensor, current_version: int | Tensor) -> tuple[Tensor, Tensor]:
    """The step-constant part, once per step: ``(base, weights)`` = (α ℓ_b, 1 − α), both [B, T]
    float32, so that log π_prox = base + weights · sg(ℓ). behav_logp: [B, T] float; versions: [B, T]."""
    alpha = staleness_alpha(versions, current_version)
    return alpha * behav_logp.detach(), 1.0 - alpha


def apply_loglinear(base: Tensor, logp: Tensor, weights: Tensor) -> Tensor:
    """log π_prox = base + weights · sg(ℓ) of one minibatch, one fused op. base, weights: that
    minibatch's rows of :func:`loglinear_plan`; logp: [b, T] current log-probs (may carry a gradient).

    Returns [b, T] float32, detached; exactly ℓ_b where α = 1 and ℓ is finite. A non-finite ℓ gives a
    non-finite result, left unguarded: that token is outside every loss's valid mask anyway.
    """
    return torch.addcmul(base, weights, logp.detach().float())


# --- the decoupled clipped loss -------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class DecoupledParams(ClipParams):
    """decoupled: ClipParams (eps_low [0.2], eps_high [= eps_low], dual_clip [None], aggregation)
    plus behav_cap [None] (>= 1) and behav_cap_mode ["mask" | "clamp"]."""

    behav_cap: float | None = None
    behav_cap_mode: str = "mask"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("behav_cap", self.behav_cap, low=1.0, allow_none=True)
        check_choice("behav_cap_mode", self.behav_cap_mode, ("mask", "clamp"))


def decoupled_loss(inp: PreparedInputs, p: DecoupledParams) -> tuple[Tensor, dict[str, Tensor]]:
    """w · PPOclip(π_θ/π_prox) with an optional cap on w; inputs [B, T] (numerics.PreparedInputs,
    π_prox required). Returns (−J, stats)."""
    prox_logp = required_prox(inp, "decoupled")
    # both log-ratios clamped to ±20 before exp (numerics.LOG_RATIO_BOUND)
    log_behav_weight = clamp_log_ratio(prox_logp - inp.behav)  # log w, constant (π_prox is detached)
    log_ratio = clamp_log_ratio(inp.logp - prox_logp)  # log r, carries the gradient
    clip = clipped_surrogate(log_ratio, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    kept = inp.valid
    if p.behav_cap is None:
        over_cap = torch.zeros_like(kept)
        behav_weight = torch.exp(log_behav_weight)
    else:
        log_cap = math.log(p.behav_cap)
        over_cap = inp.valid & (log_behav_weight > log_cap)
        if p.behav_cap_mode == "mask":
            kept = inp.valid & ~over_cap
            behav_weight = torch.exp(log_behav_weight)
        else:
            behav_weight = torch.exp(log_behav_weight.clamp(max=log_cap))
    loss = -aggregate(behav_weight * clip.objective, kept, inp, p)

    # a capped token counts as intervened on in both modes, as masked only in "mask" mode
    masked = over_cap if p.behav_cap_mode == "mask" else torch.zeros_like(over_cap)
    stats = common_stats(inp, log_ratio, clip.clipped | over_cap, masked)
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats.update(behav_weight_stats(inp, log_behav_weight))
    stats["behav_capped_frac"] = inp.tok.frac(over_cap)
    stats["applied_weight_mean"] = Reducer(kept).mean(behav_weight.detach())
    return loss, stats
