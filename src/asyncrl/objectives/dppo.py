"""DPPO, Divergence Proximal Policy Optimization (Qi et al., "Rethinking the Trust Region in LLM
Reinforcement Learning", arXiv:2602.04879; verl ``dppo_tv`` / ``dppo_kl``; docs/objectives.md).

PPO's trust region is on the ratio r = π_θ/π_anchor of the sampled token, a one-sample estimate of
the policy divergence that is very noisy for rare tokens (0.001 → 0.01 is r = 10, yet the
distribution has barely moved) and lax for likely ones (0.99 → 0.8 is r = 0.81). DPPO puts the
trust region on the divergence of the sampled token's Bernoulli instead, p = π_θ(y_t), p_a = π_anchor(y_t):

    binary TV (``dppo``):    D = p − p_a,  kept unless  A > 0 and D > δ_high,  or  A <= 0 and D < −δ_low
    binary KL (``dppo_kl``): D = KL(Bern(p_a) ‖ Bern(p)) = p_a log(p_a/p) + (1 − p_a) log((1 − p_a)/(1 − p)),
                             kept unless  A > 0, p > p_a and D > δ_high,  or  A <= 0, p < p_a and D > δ_low
    J_t = M_t · sg(min(r_t, C)) · A_t · ℓ_t,   r = π_θ/π_anchor,  C = ``ratio_cap`` [20]

As in PPO a token leaves the gradient only once it has moved past the region on the side its
advantage pushes it; inside, the gradient is the truncated-IS policy gradient min(r, C) A ∇ℓ (the
paper's §5.4 replaces dual clip by a large truncation C). Masked tokens stay in the denominator by
default, as verl's aggregation over the response mask does.

The anchor is π_prox when given, else π_behav. The authors recommend the trust region around the
rollout policy itself (verl's bypass mode: π_behav; TRL's experimental ``dppo_binary_kl``), which
also bounds the training/inference mismatch, so the natural proximal strategy is ``none``; with a
π_prox it is verl's recomputed form (TRL's ``dppo_binary_kl_recompute``). Defaults are the authors'
verl recipe: δ = 0.15 for TV and 0.05 for KL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.ppo import anchor_logp
from asyncrl.objectives.stats import common_stats

# verl's smoothing of 1 − p in the binary KL: finite at p = 1 (a sampled token of probability 1)
_ONE_MINUS_P_FLOOR = 1e-8


@dataclass(frozen=True, kw_only=True)
class DPPOParams(BaseParams):
    """dppo (binary TV): delta_low [0.15] >= 0, delta_high [= delta_low] >= 0 (probability
    differences), ratio_cap [20.0] >= 1, the truncation C of the IS weight."""

    delta_low: float = 0.15
    delta_high: float | None = None
    ratio_cap: float = 20.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("delta_low", self.delta_low, low=0.0)
        check_real("delta_high", self.delta_high, low=0.0, allow_none=True)
        check_real("ratio_cap", self.ratio_cap, low=1.0)

    @property
    def delta_high_value(self) -> float:
        """delta_high with its default (= delta_low) resolved."""
        return self.delta_low if self.delta_high is None else self.delta_high


@dataclass(frozen=True, kw_only=True)
class DPPOKLParams(DPPOParams):
    """dppo_kl (binary KL): delta_low [0.05] >= 0, delta_high [= delta_low] >= 0 (nats), ratio_cap [20.0]."""

    delta_low: float = 0.05


def binary_tv(logp: Tensor, anchor: Tensor) -> Tensor:
    """[B, T] signed p − p_a of the sampled token. logp, anchor: [B, T] float32 log-probs, detached.

    Log-probs are capped at 0 first: a real one never exceeds it, and the cap keeps p a probability
    for any finite input (the loss only reads the result at valid tokens)."""
    return torch.exp(logp.clamp(max=0.0)) - torch.exp(anchor.clamp(max=0.0))


def binary_kl(logp: Tensor, anchor: Tensor) -> Tensor:
    """[B, T] KL(Bern(p_a) ‖ Bern(p)) >= 0 of the sampled token. logp, anchor: [B, T] float32 log-probs,
    detached, capped at 0 as in ``binary_tv``. 1 − p is −expm1(ℓ), exact where p is near 1."""
    logp, anchor = logp.clamp(max=0.0), anchor.clamp(max=0.0)
    p_anchor = torch.exp(anchor)
    rest = torch.log((-torch.expm1(anchor) + _ONE_MINUS_P_FLOOR) / (-torch.expm1(logp) + _ONE_MINUS_P_FLOOR))
    return p_anchor * (anchor - logp) + (1.0 - p_anchor) * rest


def _dppo(inp: PreparedInputs, p: DPPOParams, kind: str) -> tuple[Tensor, dict[str, Tensor]]:
    """The shared body; ``kind`` is the divergence, "tv" or "kl". Returns (−J, stats)."""
    valid = inp.valid
    anchor = anchor_logp(inp)
    log_r = clamp_log_ratio(inp.logp - anchor)
    logp_d = inp.logp.detach()
    pos = inp.adv > 0  # verl's split: a zero advantage takes the A < 0 side (it has no gradient anyway)
    if kind == "tv":
        prob_change = binary_tv(logp_d, anchor)  # signed: the side is in the sign
        out_upper = pos & (prob_change > p.delta_high_value)
        out_lower = ~pos & (prob_change < -p.delta_low)
        divergence = prob_change.abs()
    else:
        divergence = binary_kl(logp_d, anchor)  # >= 0: the side comes from comparing the log-probs
        out_upper = pos & (logp_d > anchor) & (divergence > p.delta_high_value)
        out_lower = ~pos & (logp_d < anchor) & (divergence > p.delta_low)
    masked = valid & (out_upper | out_lower)
    log_r_d = log_r.detach()
    capped = valid & ~masked & (log_r_d > math.log(p.ratio_cap))
    weight = torch.exp(log_r_d).clamp(max=p.ratio_cap)
    loss = -aggregate(weight * inp.adv * inp.logp, valid & ~masked, inp, p)
    stats = common_stats(inp, log_r, masked | capped, masked)
    stats["masked_upper_frac"] = inp.tok.frac(out_upper)
    stats["masked_lower_frac"] = inp.tok.frac(out_lower)
    stats["ratio_capped_frac"] = inp.tok.frac(capped)
    stats["divergence_mean"] = inp.tok.mean(divergence)
    stats["divergence_max"] = inp.tok.max(divergence)
    return loss, stats


def dppo_loss(inp: PreparedInputs, p: DPPOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO-Binary-TV. Returns (−J, stats); ``divergence_mean/max`` describe |p − p_a| over valid tokens,
    ``masked_upper_frac`` / ``masked_lower_frac`` the tokens masked on each side, ``ratio_capped_frac``
    the kept tokens whose weight was truncated at C."""
    return _dppo(inp, p, "tv")


def dppo_kl_loss(inp: PreparedInputs, p: DPPOKLParams) -> tuple[Tensor, dict[str, Tensor]]:
    """DPPO-Binary-KL. Returns (−J, stats) as ``dppo_loss``, with the binary KL as the divergence."""
    return _dppo(inp, p, "kl")
