"""M2PO (Zheng, Zhao, Chen, "Prosperity before Collapse", arXiv:2510.01161; docs/objectives.md).

A trust region on the second moment of log ρ, ρ = π_θ/π_behav (``prox_logp`` is not used).

variant "paper" (paper and AReaL): over the N valid tokens, sort (log ρ)² ascending (stable, so ties
    are broken by position) and keep the longest prefix whose mean is < τ (at least one token, as
    AReaL, never all masked); J = Σ M_t ρ_t A_t / N — no ε-clipping.
variant "official" (Infini-AI-Lab/M2PO ``compute_m2po_policy_loss``): only harmful tokens
    (A > 0 ∧ ρ > 1) ∨ (A < 0 ∧ ρ < 1) enter the statistic. If their mean (log ρ)² <= τ nothing is
    clipped; otherwise τ* solves Σ_h min((log ρ)², τ*²) = τ N_h (water-filling) and the ordinary clipped
    surrogate runs with ε_low = max(1 − e^{−τ*}, floor_eps_low), ε_high = max(e^{τ*} − 1, floor_eps_high).
    The official code rounds τ* down to the previous breakpoint; here it is solved exactly.

Batch-level statistic: the mask / bounds depend on every token of the call, so splitting a minibatch
into micro-batches changes them. Call m2po on the whole optimizer minibatch (global denominators then
only matter for data parallelism), or accept per-micro-batch trust regions. The two forms are
identical whenever nothing is masked / clipped (tested).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, Reducer, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams, check_choice, check_real
from asyncrl.objectives.ppo import clipped_surrogate
from asyncrl.objectives.stats import clip_stats, common_stats


@dataclass(frozen=True, kw_only=True)
class M2POParams(BaseParams):
    """m2po: tau [0.04] > 0, variant ["paper" | "official"]; floor_eps_low [0.3] and floor_eps_high [0.5]
    are the official code's minimum clip ranges (used by variant "official" only)."""

    tau: float = 0.04
    variant: str = "paper"
    floor_eps_low: float = 0.3
    floor_eps_high: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("tau", self.tau, low=0.0, low_open=True)
        check_choice("variant", self.variant, ("paper", "official"))
        check_real("floor_eps_low", self.floor_eps_low, low=0.0, high=1.0)
        check_real("floor_eps_high", self.floor_eps_high, low=0.0)


def _sorted_valid(x: Tensor, sel: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Selected entries of x [B, T] first, ascending (stable), without a host sync.

    Returns (sorted values with +inf after the selected ones [B*T], sort permutation, count n)."""
    flat = torch.where(sel, x, float("inf")).reshape(-1)
    values, order = torch.sort(flat, stable=True)
    return values, order, sel.sum()


def m2po_paper_mask(m2: Tensor, valid: Tensor, tau: float) -> Tensor:
    """[B, T] bool tokens kept by the paper's rule. m2: [B, T] (log ρ)², valid: [B, T] bool."""
    values, order, n = _sorted_valid(m2, valid)
    j = torch.arange(1, values.numel() + 1, device=m2.device)
    prefix_mean = torch.cumsum(torch.where(j <= n, values, 0.0), 0) / j
    # Prefix means of an ascending sequence never decrease, so the kept set is a prefix; cumprod makes
    # that explicit even if rounding made two consecutive means disagree.
    ok = ((prefix_mean < tau) & (j <= n)).int().cumprod(0)
    n_keep = torch.maximum(ok.sum(), n.clamp(max=1))
    keep_sorted = j <= n_keep
    keep = torch.zeros_like(keep_sorted).scatter(0, order, keep_sorted)
    return keep.reshape(valid.shape) & valid


def water_fill_level(v: Tensor, sel: Tensor, tau: float) -> Tensor:
    """0-dim τ*² with Σ_sel min(v, τ*²) = τ · n_sel; +inf when mean_sel v <= τ (no constraint).

    v: [B, T] non-negative; sel: [B, T] bool. With v ascending and C_k the sum of the k smallest,
    G_k = C_k + (n − k) v_{k−1} = Σ min(v, v_{k−1}) is non-decreasing; k* = max{k < n : G_k <= S} and
    τ*² = (S − C_{k*}) / (n − k*) lies in [v_{k*−1}, v_{k*}).
    """
    values, _, n = _sorted_valid(v, sel)
    target = tau * n.float()
    k = torch.arange(values.numel(), device=v.device)  # candidate k = 0 .. M−1
    finite_vals = torch.where(k < n, values, 0.0)
    c_k = torch.cumsum(finite_vals, 0) - finite_vals  # sum of the k smallest
    prev = torch.cat([finite_vals.new_zeros(1), finite_vals[:-1]])  # v_{k−1}, v_{−1} := 0
    g_k = c_k + (n - k).float() * prev
    ok = ((g_k <= target) & (k < n)).int().cumprod(0)
    k_star = (ok.sum() - 1).clamp(min=0)
    c_star = c_k[k_star] if values.numel() else target.new_zeros(())
    level = (target - c_star) / (n - k_star).clamp(min=1).float()
    total = finite_vals.sum()
    return torch.where((n == 0) | (total <= target), float("inf"), level)


def m2po_loss(inp: PreparedInputs, p: M2POParams) -> tuple[Tensor, dict[str, Tensor]]:
    """Second-moment trust region on log ρ. Returns (−J, stats): ``m2_before`` / ``m2_after`` are the mean
    (log ρ)² over the statistic's tokens (all valid for "paper", harmful for "official") before and after
    masking / capping; "official" also reports the derived ``m2po_eps_low`` / ``m2po_eps_high``."""
    valid = inp.valid
    log_rho = clamp_log_ratio(inp.logp - inp.behav)
    m2 = log_rho.detach() ** 2
    zeros = torch.zeros_like(valid)
    if p.variant == "paper":
        kept = m2po_paper_mask(m2, valid, p.tau)
        loss = -aggregate(torch.exp(log_rho) * inp.adv, kept, inp, p)
        dropped = valid & ~kept
        stats = common_stats(inp, log_rho, dropped, dropped)
        stats.update(m2_before=inp.tok.mean(m2), m2_after=Reducer(kept).mean(m2))
        return loss, stats
    lr_d = log_rho.detach()
    harmful = valid & (((inp.adv > 0) & (lr_d > 0)) | ((inp.adv < 0) & (lr_d < 0)))
    level = water_fill_level(m2, harmful, p.tau)
    tau_star = level.sqrt()
    eps_low = torch.where(torch.isinf(level), 1.0, (-torch.expm1(-tau_star)).clamp(min=p.floor_eps_low))
    eps_high = torch.where(torch.isinf(level), float("inf"), torch.expm1(tau_star).clamp(min=p.floor_eps_high))
    clip = clipped_surrogate(log_rho, inp.adv, eps_low, eps_high, None)
    loss = -aggregate(clip.objective, valid, inp, p)
    stats = common_stats(inp, log_rho, clip.clipped, zeros)
    on_harmful = Reducer(harmful)
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats.update(
        m2_before=on_harmful.mean(m2),
        m2_after=on_harmful.mean(torch.minimum(m2, level)),
        m2po_eps_low=eps_low.detach(),
        m2po_eps_high=eps_high.detach(),
    )
    return loss, stats
