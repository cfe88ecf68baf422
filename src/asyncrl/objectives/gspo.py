"""GSPO (Qwen, arXiv:2507.18071; docs/objectives.md): a sequence-level, length-normalized ratio.

    s_i = exp( (1/n_i) Σ_{t∈T_i} (ℓ_it − ℓ_anchor,it) ),   J_i = min(s_i Â_i, clip(s_i, 1−ε_low, 1+ε_high) Â_i)

anchor = π_prox if given, else π_behav. Every valid token of sequence i carries J_i, so the paper's
(1/G) Σ_i J_i is ``agg="seq_mean_token_mean"`` (verl forces it for GSPO); the default ``agg`` is
"token_mean" like every other loss (the project's parameter contract), which weights J_i by n_i.
GSPO-token (``token_level=True``): s_it = sg(s_i) · exp(ℓ_it − sg(ℓ_it)) with token advantages A_it;
numerically s_it = s_i, gradient s_i ∇ℓ_it per token.
log s_i is clamped to [−20, 10] (verl clamps at 10). Sequences are never split by micro-batching, so
the loss is micro-batch invariant with global denominators.
"""

from __future__ import annotations

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
from asyncrl.objectives.params import BaseParams, check_bool, check_real
from asyncrl.objectives.ppo import anchor_logp, clipped_surrogate
from asyncrl.objectives.stats import clip_stats, common_stats

_MAX_LOG_SEQ_RATIO = 10.0


@dataclass(frozen=True, kw_only=True)
class GSPOParams(BaseParams):
    """gspo: eps_low [3e-4] in [0, 1), eps_high [4e-4] >= 0, token_level [False] (GSPO-token)."""

    eps_low: float = 3e-4
    eps_high: float = 4e-4
    token_level: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("eps_low", self.eps_low, low=0.0, high=1.0, high_open=True)
        check_real("eps_high", self.eps_high, low=0.0)
        check_bool("token_level", self.token_level)


def gspo_loss(inp: PreparedInputs, p: GSPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Sequence-ratio clipped surrogate. Returns (−J, stats); ``seq_ratio_*`` describe s_i and
    ``seq_clipfrac`` the fraction of valid sequences with a clipped token."""
    valid = inp.valid
    seq_valid = inp.n_i > 0
    anchor = anchor_logp(inp)
    log_s = seq_sum(inp.logp - anchor, inp.valid_f) / inp.n_i.clamp(min=1)
    log_s = log_s.clamp(-LOG_RATIO_BOUND, _MAX_LOG_SEQ_RATIO)
    if p.token_level:
        log_ratio = log_s.detach()[:, None] + inp.logp - inp.logp.detach()
        adv = inp.adv
    else:
        log_ratio = log_s[:, None].expand_as(inp.logp)
        adv = inp.seq_adv[:, None] * inp.valid_f
    clip = clipped_surrogate(log_ratio, adv, p.eps_low, p.eps_high, None)
    loss = -aggregate(clip.objective, valid, inp, p)
    token_log_r = clamp_log_ratio(inp.logp - anchor)
    stats = common_stats(inp, token_log_r, clip.clipped, torch.zeros_like(valid))
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    ls = log_s.detach()
    stats["seq_ratio_mean"] = masked_mean(ls.exp(), seq_valid)
    stats["seq_ratio_min"] = masked_min(ls, seq_valid).exp()
    stats["seq_ratio_max"] = masked_max(ls, seq_valid).exp()
    stats["seq_clipfrac"] = masked_frac(as_float(clip.clipped & valid).sum(-1) > 0, seq_valid)
    return loss, stats
