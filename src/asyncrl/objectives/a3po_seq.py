"""Sequence-level A-3PO (GSPO-style decoupled PPO; docs/objectives.md, "A-3PO past staleness 8").

With a proximal policy π_prox (A-3PO's log-linear one by default), per sequence i over its n_i valid
tokens:

    log s_i = (1/n_i) Σ_t (ℓ_it − ℓ_prox,it),   log w_i = (1/n_i) Σ_t (ℓ_prox,it − ℓ_b,it)   (w_i constant),
    J_i = min(w_i, c) · min(s_i Â_i, clip(s_i, 1 − ε_low, 1 + ε_high) Â_i).

With ``loglinear`` (ℓ_prox = α ℓ_b + (1 − α) sg ℓ): log s_i = mean_t α_t log ρ_it and log w_i = mean_t
(1 − α_t) log ρ_it; at one staleness d per sequence s_i = ρ̄_i^α and w_i = ρ̄_i^(1−α), ρ̄_i the
geometric mean of ρ over the sequence: A-3PO applied to the sequence-mean log-ratio. The clip acts
on the whole sequence (GSPO's ε: 3e-4 / 4e-4), so at d = 16 it still acts once |mean log ρ| exceeds
~16 · 4e-4 = 0.0064, and a geometric mean spreads one token's large ρ over the sequence. Both logs
are clamped to [−20, 10] (GSPO's bound). Every valid token of i carries J_i (the ``agg`` contract of
gspo.py). ``behav_cap`` c [None] truncates w_i.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import (
    LOG_RATIO_BOUND,
    PreparedInputs,
    aggregate,
    as_float,
    clamp_log_ratio,
    masked_frac,
    masked_max,
    masked_mean,
    masked_min,
    seq_sum,
)
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.ppo import clipped_surrogate, required_prox
from asyncrl.objectives.stats import clip_stats, common_stats

MAX_LOG_SEQ_RATIO = 10.0  # the upper clamp of GSPO's log s_i (verl's)


@dataclass(frozen=True, kw_only=True)
class A3POSeqParams(BaseParams):
    """a3po_seq: eps_low [3e-4] in [0, 1), eps_high [4e-4] >= 0, behav_cap [None] (>= 1) on w_i."""

    eps_low: float = 3e-4
    eps_high: float = 4e-4
    behav_cap: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("eps_low", self.eps_low, low=0.0, high=1.0, high_open=True)
        check_real("eps_high", self.eps_high, low=0.0)
        check_real("behav_cap", self.behav_cap, low=1.0, allow_none=True)


def _seq_mean_log(x: Tensor, inp: PreparedInputs) -> Tensor:
    """[B] clamped mean over each sequence's valid tokens of the [B, T] log-ratio x."""
    return (seq_sum(x, inp.valid_f) / inp.n_i.clamp(min=1)).clamp(-LOG_RATIO_BOUND, MAX_LOG_SEQ_RATIO)


def a3po_seq_loss(inp: PreparedInputs, p: A3POSeqParams) -> tuple[Tensor, dict[str, Tensor]]:
    """min(w_i, c) · GSPO clip of s_i; [B, T] inputs. Returns (−J, stats); ``seq_ratio_*`` describe
    s_i, ``seq_behav_weight_*`` w_i (before the cap), ``seq_clipfrac`` the clipped sequences."""
    prox = required_prox(inp, "a3po_seq")
    seq_valid = inp.n_i > 0
    log_s = _seq_mean_log(inp.logp - prox, inp)
    log_w = _seq_mean_log(prox - inp.behav, inp)
    log_cap = math.inf if p.behav_cap is None else math.log(p.behav_cap)
    over_cap = seq_valid & (log_w > log_cap)
    weight = torch.exp(log_w.clamp(max=log_cap))
    adv = inp.seq_adv[:, None] * inp.valid_f
    clip = clipped_surrogate(log_s[:, None].expand_as(inp.logp), adv, p.eps_low, p.eps_high, None)
    loss = -aggregate(weight[:, None] * clip.objective, inp.valid, inp, p)
    token_log_r = clamp_log_ratio(inp.logp - prox)
    stats = common_stats(inp, token_log_r, clip.clipped | (over_cap[:, None] & inp.valid),
                         torch.zeros_like(inp.valid))
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    ls, lw = log_s.detach(), log_w.detach()
    stats["seq_ratio_mean"] = masked_mean(ls.exp(), seq_valid)
    stats["seq_ratio_min"] = masked_min(ls, seq_valid).exp()
    stats["seq_ratio_max"] = masked_max(ls, seq_valid).exp()
    stats["seq_behav_weight_mean"] = masked_mean(lw.exp(), seq_valid)
    stats["seq_behav_weight_max"] = masked_max(lw, seq_valid).exp()
    stats["seq_behav_capped_frac"] = masked_frac(over_cap, seq_valid)
    stats["seq_clipfrac"] = masked_frac(as_float(clip.clipped & inp.valid).sum(-1) > 0, seq_valid)
    return loss, stats
