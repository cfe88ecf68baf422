"""Off-policy sequence masking (DeepSeek-V3.2, arXiv:2512.02556; docs/objectives.md).

    KL̂_i = mean_{t∈T_i} (ℓ_b,it − sg(ℓ_it)),   M_i = 0 if (Â_i < 0 and KL̂_i > δ) else 1,
    J = Σ M_i · PPOclip(r_it, A_it),   r = π_θ/π_anchor (π_prox if given, else π_behav)

KL̂ always uses π_behav (the inference engine's policy), so it measures staleness and train/inference
mismatch together. Â_i is the sequence advantage (the [B] input, or the mean of a [B, T] input over
the sequence's valid tokens). Positive- and zero-advantage sequences are never masked; KL̂ < 0 keeps.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from asyncrl.objectives.numerics import (
    PreparedInputs,
    aggregate,
    clamp_log_ratio,
    masked_frac,
    masked_max,
    masked_mean,
    seq_sum,
)
from asyncrl.objectives.params import REQUIRED, ClipParams, check_real
from asyncrl.objectives.ppo import anchor_logp, clipped_surrogate
from asyncrl.objectives.stats import clip_stats, common_stats


@dataclass(frozen=True, kw_only=True)
class OPSMParams(ClipParams):
    """opsm: delta (required, >= 0; TRL suggests e.g. 0.5) plus ClipParams for the host PPO loss."""

    delta: float = REQUIRED

    def __post_init__(self) -> None:
        if self.delta is REQUIRED:
            raise ValueError("delta: required parameter of loss 'opsm' is missing")
        super().__post_init__()
        check_real("delta", self.delta, low=0.0)


def opsm_loss(inp: PreparedInputs, p: OPSMParams) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate with drifted negative-advantage sequences masked. Returns (−J, stats)."""
    valid = inp.valid
    seq_valid = inp.n_i > 0
    seq_kl = seq_sum(inp.behav - inp.logp.detach(), inp.valid_f) / inp.n_i.clamp(min=1)
    neg = seq_valid & (inp.seq_adv < 0)
    drop_seq = neg & (seq_kl > p.delta)
    dropped = valid & drop_seq[:, None]
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    loss = -aggregate(clip.objective, valid & ~dropped, inp, p)
    stats = common_stats(inp, log_r, clip.clipped | dropped, dropped)
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats["masked_neg_adv_seq_frac"] = masked_frac(drop_seq, neg)
    stats["seq_kl_mean"] = masked_mean(seq_kl, seq_valid)
    stats["seq_kl_max"] = masked_max(seq_kl, seq_valid)
    return loss, stats
