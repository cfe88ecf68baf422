"""Diagnostics (docs/objectives.md) shared by every objective.

One name means one thing in every loss. Every loss returns at least ``COMMON_STATS``:

- n_valid_tokens, n_valid_seqs: tokens in loss_mask with finite inputs; sequences with >= 1 of them.
- nonfinite_tokens: loss_mask tokens dropped because a log-prob or advantage was not finite.
- importance_weight_mean/min/max: ρ = π_θ/π_behav (total ratio) over valid tokens, from the ±20-clamped
  log-ratio (so the max is at most e^20).
- ess_frac: sequence-level ESS fraction of ρ, (Σ w_i)² / (B' Σ w_i²) with w_i = Π_t ρ_it (§12).
- tv: ½ mean |ρ − 1| (total-variation estimate between π_behav and π_θ, §11).
- ratio_mean/min/max: r = π_θ/π_anchor, the ratio the method's trust region or weight acts on
  (anchor = π_prox if the method uses prox_logp, else π_behav).
- approx_kl_k1, approx_kl_k3: mean(−log r), mean(r − 1 − log r) (both estimate KL(π_anchor‖π_θ)).
- clipped_tokens: fraction of valid tokens on which the method intervenes at all (ratio clipping,
  weight truncation, masking, rejection, filtering, detaching); 0 for a method that never does.
- masked_token_frac: fraction of valid tokens removed from the gradient by a mask, rejection or filter
  (ratio clipping and weight truncation are not masking).
- masked_seq_frac: fraction of valid sequences all of whose valid tokens are masked.
All ratio/fraction statistics over an empty set are NaN (ess_frac too); counts are float32.

Extrema: every statistic whose name ends in ``_max`` / ``_min`` (here and in each loss's extras) is
the maximum / minimum over the tokens or sequences of one call, and no other statistic is one; a
caller that combines several calls (minibatches) reduces those with max / min. The counts
(n_valid_tokens, n_valid_seqs, nonfinite_tokens, future_version_tokens) are per call.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, Reducer, as_float, clamp_log_ratio, masked_frac, seq_sum
from asyncrl.objectives.vcpo import ess

COMMON_STATS = (
    "n_valid_tokens",
    "n_valid_seqs",
    "nonfinite_tokens",
    "importance_weight_mean",
    "importance_weight_min",
    "importance_weight_max",
    "ess_frac",
    "tv",
    "ratio_mean",
    "ratio_min",
    "ratio_max",
    "approx_kl_k1",
    "approx_kl_k3",
    "clipped_tokens",
    "masked_token_frac",
    "masked_seq_frac",
)


@torch.no_grad()
def ratio_stats(log_r: Tensor, over: Reducer, prefix: str = "ratio") -> dict[str, Tensor]:
    """mean/min/max of exp(log_r) over a reducer's tokens. log_r: [B, T] clamped log-ratio."""
    return {
        f"{prefix}_mean": over.mean(torch.exp(log_r)),
        f"{prefix}_min": torch.exp(over.min(log_r)),
        f"{prefix}_max": torch.exp(over.max(log_r)),
    }


@torch.no_grad()
def kl_stats(log_r: Tensor, over: Reducer) -> dict[str, Tensor]:
    """k1 and k3 estimates of KL(π_anchor‖π_θ) from log r = log π_θ − log π_anchor on anchor samples."""
    return {
        "approx_kl_k1": -over.mean(log_r),
        "approx_kl_k3": over.mean(torch.expm1(log_r) - log_r),
    }


@torch.no_grad()
def common_stats(
    inp: PreparedInputs, log_r: Tensor, intervened: Tensor, masked: Tensor
) -> dict[str, Tensor]:
    """The ``COMMON_STATS`` of one loss call.

    log_r: [B, T] clamped log-ratio against the method's anchor; intervened / masked: [B, T] bool
    (see the module docstring), only their valid positions are read.
    """
    tok = inp.tok
    seq_valid = inp.n_i > 0
    log_rho = clamp_log_ratio(inp.logp.detach() - inp.behav)
    rho = torch.exp(log_rho)
    masked_v = masked & inp.valid
    seq_all_masked = seq_valid & (as_float(masked_v).sum(-1) == inp.n_i)
    _, ess_frac = ess(seq_sum(log_rho, inp.valid_f), seq_valid)
    stats = {
        "n_valid_tokens": tok.n,
        "n_valid_seqs": seq_valid.sum().float(),
        "nonfinite_tokens": inp.nonfinite.detach(),
        "importance_weight_mean": tok.mean(rho),
        "importance_weight_min": torch.exp(tok.min(log_rho)),
        "importance_weight_max": torch.exp(tok.max(log_rho)),
        "ess_frac": torch.where(seq_valid.any(), ess_frac, float("nan")),
        "tv": 0.5 * tok.mean((rho - 1.0).abs()),
        "clipped_tokens": tok.frac(intervened),
        "masked_token_frac": tok.frac(masked_v),
        "masked_seq_frac": masked_frac(seq_all_masked, seq_valid),
    }
    stats.update(ratio_stats(log_r.detach(), tok))
    stats.update(kl_stats(log_r.detach(), tok))
    return stats


@torch.no_grad()
def clip_stats(upper: Tensor, lower: Tensor, dual: Tensor, over: Reducer) -> dict[str, Tensor]:
    """PPO-style clip fractions (upper and lower branch, dual clip) over a reducer's tokens."""
    return {
        "clipfrac_upper": over.frac(upper),
        "clipfrac_lower": over.frac(lower),
        "dual_clipfrac": over.frac(dual),
    }


@torch.no_grad()
def behav_weight_stats(inp: PreparedInputs, log_w: Tensor) -> dict[str, Tensor]:
    """w = π_prox/π_behav over valid tokens (before any cap) and the behavior KL k1 = mean(ℓ_b − ℓ_p)."""
    out = ratio_stats(log_w, inp.tok, prefix="behav_weight")
    out["behav_kl_k1"] = -inp.tok.mean(log_w)
    return out


@torch.no_grad()
def staleness_stats(versions: Tensor, current_version: int | Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Staleness d = V − v over mask tokens with v >= 0: mean, min, max, and the number of tokens with
    d < 0 (``future_version_tokens``; treated as on-policy by ``staleness_alpha``). NaN when empty.

    versions: [B, T] integer; mask: [B, T] bool.
    """
    gen = mask & (versions >= 0)
    d = (current_version - versions).float()
    on_gen = Reducer(gen)
    return {
        "staleness_mean": on_gen.mean(d),
        "staleness_min": on_gen.min(d),
        "staleness_max": on_gen.max(d),
        "future_version_tokens": (gen & (d < 0)).sum().float(),
    }
