"""Behavior-mismatch corrections: truncated IS (TIS, §5) and masked IS (MIS / IcePop, §7).

Both act on a correction weight k built from the *behavior* log-probs:
- with ``prox_logp``: k from w = π_prox/π_behav (constant), on top of PPO's clipped surrogate against
  π_prox: J_t = k_t · PPOclip(r_t), r = π_θ/π_prox (decoupled PPO with a truncated/masked weight);
- without it ("bypass", no PPO anchor): k from ρ = π_θ/π_behav (detached), REINFORCE form
  J_t = sg(k_t) · A_t · ℓ_t; the clip parameters are then unused.

TIS (Yao, Liu et al. 2025, fengyao.notion.site/off-policy-rl): weight min(k, cap); token level k = w_t,
sequence level k_i = exp(S_i), S_i = Σ_t log w_it (clamped to ±20; truncation compares in log space).
MIS (IcePop, Ring-1T arXiv:2510.18855; verl rollout-correction docs): keep iff low <= k <= high and
weight kept tokens by k (IcePop's M(k) = k·1[low <= k <= high]); the level picks k: token w_t, sequence
exp(S_i), geometric exp(S_i / n_i). Rejected tokens stay in the denominator by default (§0.8).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, Reducer, aggregate, clamp_log_ratio, seq_sum
from asyncrl.objectives.params import ClipParams, check_choice, check_real
from asyncrl.objectives.ppo import ClipResult, clipped_surrogate
from asyncrl.objectives.stats import behav_weight_stats, clip_stats, common_stats


def correction_log_weight(inp: PreparedInputs, level: str) -> Tensor:
    """[B, T] float32 log k (detached), broadcast over the tokens of a sequence for sequence levels.

    Built from log w = ℓ_p − ℓ_b when prox is given, else from log ρ = ℓ − ℓ_b (bypass).
    Sequence sums are taken on the unclamped token log-ratios and clamped once (§0.4).
    """
    top = inp.logp.detach() if inp.prox is None else inp.prox
    raw = top - inp.behav
    if level == "token":
        return clamp_log_ratio(raw)
    s = seq_sum(raw, inp.valid_f)
    if level == "geometric":
        s = s / inp.n_i.clamp(min=1)
    return clamp_log_ratio(s)[:, None].expand_as(raw)


def _weighted_objective(
    inp: PreparedInputs, p: ClipParams, weight: Tensor
) -> tuple[Tensor, Tensor, ClipResult | None]:
    """(J [B, T], log_r [B, T], clip result or None in bypass) for a detached weight [B, T]."""
    if inp.prox is None:
        log_r = clamp_log_ratio(inp.logp - inp.behav)
        return weight * inp.adv * inp.logp, log_r, None
    log_r = clamp_log_ratio(inp.logp - inp.prox)
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    return weight * clip.objective, log_r, clip


def _correction_stats(
    inp: PreparedInputs, clip: ClipResult | None, weight: Tensor, kept: Tensor
) -> dict[str, Tensor]:
    """Clip fractions (0 in bypass), behavior-weight stats (w ≡ 1 in bypass), applied weights, χ²."""
    if clip is None:
        zeros = torch.zeros_like(inp.valid)
        out = clip_stats(zeros, zeros, zeros, inp.tok)
        out.update(behav_weight_stats(inp, torch.zeros_like(inp.behav)))
    else:
        out = clip_stats(clip.upper, clip.lower, clip.dual, inp.tok)
        out.update(behav_weight_stats(inp, clamp_log_ratio(inp.prox - inp.behav)))
    w_tok = torch.exp(correction_log_weight(inp, "token"))
    out["chi2"] = inp.tok.mean(w_tok * w_tok) - 1.0
    on_kept = Reducer(kept)
    out["applied_weight_mean"] = on_kept.mean(weight.detach())
    out["applied_weight_max"] = on_kept.max(weight.detach())
    return out


@dataclass(frozen=True, kw_only=True)
class TISParams(ClipParams):
    """tis: cap [2.0] (>= 1), level ["token" | "sequence"], plus ClipParams (used only with prox_logp)."""

    cap: float = 2.0
    level: str = "token"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("cap", self.cap, low=1.0)
        check_choice("level", self.level, ("token", "sequence"))


def tis_loss(inp: PreparedInputs, p: TISParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Truncated importance sampling. Returns (−J, stats); ``truncated_frac`` counts tokens whose weight
    (token or sequence) exceeded the cap."""
    log_cap = math.log(p.cap)
    log_k = correction_log_weight(inp, p.level)
    truncated = inp.valid & (log_k > log_cap)
    weight = torch.exp(log_k.clamp(max=log_cap))
    objective, log_r, clip = _weighted_objective(inp, p, weight)
    loss = -aggregate(objective, inp.valid, inp, p)
    intervened = truncated if clip is None else truncated | clip.clipped
    stats = common_stats(inp, log_r, intervened, torch.zeros_like(truncated))
    stats.update(_correction_stats(inp, clip, weight, inp.valid))
    stats["truncated_frac"] = inp.tok.frac(truncated)
    return loss, stats


@dataclass(frozen=True, kw_only=True)
class MISParams(ClipParams):
    """mis: low [0.5] in [0, 1), high [5.0] > 1, level ["token" | "sequence" | "geometric"]."""

    low: float = 0.5
    high: float = 5.0
    level: str = "token"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("low", self.low, low=0.0, high=1.0, high_open=True)
        check_real("high", self.high, low=1.0, low_open=True)
        check_choice("level", self.level, ("token", "sequence", "geometric"))


def mis_loss(inp: PreparedInputs, p: MISParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Masked importance sampling (IcePop at token level). Returns (−J, stats)."""
    log_k = correction_log_weight(inp, p.level)
    log_low = math.log(p.low) if p.low > 0 else float("-inf")
    in_band = (log_k >= log_low) & (log_k <= math.log(p.high))
    kept = inp.valid & in_band
    weight = torch.exp(log_k)
    objective, log_r, clip = _weighted_objective(inp, p, weight)
    loss = -aggregate(objective, kept, inp, p)
    rejected = inp.valid & ~in_band
    intervened = rejected if clip is None else rejected | clip.clipped
    stats = common_stats(inp, log_r, intervened, rejected)
    stats.update(_correction_stats(inp, clip, weight, kept))
    return loss, stats
