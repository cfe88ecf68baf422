"""VCPO pieces as pure functions (docs/objectives.md, Huang et al., arXiv:2602.17616).

- ``ess``: sequence-level effective sample size of importance weights, in log space.
- ``ess_lr_scale``: the learning-rate multiplier sqrt(min(1, ρ_ess / ρ_base)) (or linear).
- ``opob_baseline``: the off-policy optimal baseline b* = Σ w² ‖g‖² R / Σ w² ‖g‖² per group.
The two-buffer gradient bookkeeping that uses b* belongs to the trainer, not here.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from asyncrl.objectives.params import check_choice, check_real

# VCPO's code adds 1e-8 to Σ w²; with max-normalized weights Σ w² >= 1, so it only guards 0/0.
_ESS_EPS = 1e-8
_OPOB_EPS = 1e-8


def ess(log_w: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Effective sample size of sequence weights w_i = exp(S_i) and its fraction ESS / B'.

    log_w: [B, T] float per-token log importance weights (S_i = Σ_t over mask), or [B] float
        per-sequence log weights S_i. mask: bool of the same shape. Non-finite entries are ignored.
    Returns (ESS, ESS / B') as 0-dim float32 tensors, where B' counts sequences with >= 1 valid entry.
    ESS = (Σ w)² / (Σ w² + 1e-8) lies in [1, B']; B' = 0 gives (0, 0) — VCPO then sets the LR to 0.

    The weights are normalized by exp(−max S) (ESS is scale-invariant), so no clamp is needed and
    none is applied: clamping S_i at ±20 would overstate the ESS of degenerate batches.
    """
    if log_w.shape != mask.shape or log_w.dim() not in (1, 2):
        raise ValueError(f"log_w and mask: expected equal [B, T] or [B] shapes, got {tuple(log_w.shape)} "
                         f"and {tuple(mask.shape)}")
    log_w = log_w.detach().float()
    valid = mask.bool() & torch.isfinite(log_w)
    if log_w.dim() == 2:
        seq_valid = valid.any(-1)
        s = torch.where(valid, log_w, 0.0).sum(-1)
    else:
        seq_valid = valid
        s = torch.where(valid, log_w, 0.0)
    n = seq_valid.sum()
    if s.numel() == 0:
        zero = torch.zeros((), device=log_w.device)
        return zero, zero
    top = torch.where(seq_valid, s, float("-inf")).amax()
    top = torch.where(n > 0, top, 0.0)
    w = torch.where(seq_valid, torch.exp(torch.where(seq_valid, s - top, 0.0)), 0.0)
    ess_value = w.sum() ** 2 / ((w * w).sum() + _ESS_EPS)
    return ess_value, ess_value / n.clamp(min=1).float()


def ess_lr_scale(ess_frac: float | Tensor, base_ratio: float = 1.0, rule: str = "sqrt") -> float | Tensor:
    """LR multiplier from an ESS fraction: sqrt(min(1, ess_frac / base_ratio)) ("sqrt", VCPO's
    default) or min(1, ess_frac / base_ratio) ("linear"). A float in gives a float, a tensor a tensor.
    """
    check_real("base_ratio", base_ratio, low=0.0, low_open=True)
    check_choice("rule", rule, ("sqrt", "linear"))
    if isinstance(ess_frac, Tensor):
        x = (ess_frac.float() / base_ratio).clamp(min=0.0, max=1.0)
        return x.sqrt() if rule == "sqrt" else x
    x = min(1.0, max(0.0, float(ess_frac) / base_ratio))
    return math.sqrt(x) if rule == "sqrt" else x


def opob_baseline(
    rewards: Tensor, weights: Tensor, grad_sq_norms: Tensor, group_ids: Tensor | None = None
) -> Tensor:
    """Off-policy optimal baseline of VCPO, b_g = Σ_{i∈g} W_i R_i / (Σ_{i∈g} W_i + 1e-8), W_i = ‖g_i‖² w_i².

    rewards: [B] float R_i (raw reward for scope "group", advantage scalar for scope "minibatch").
    weights: [B] float sequence IS weights w_i (not squared; any common per-group scale cancels, so
        max-normalized weights from log space are fine). grad_sq_norms: [B] float ‖∇ log π(τ_i)‖².
    group_ids: [B] integer prompt ids; None means one group (VCPO's "minibatch" scope).
    Returns [B] float32: the baseline of each sequence's group. VCPO's ``norm_by_std`` divides every
    term of a group by the same σ, which cancels in b*, so it has no parameter here.
    """
    b = rewards.shape
    if rewards.dim() != 1 or weights.shape != b or grad_sq_norms.shape != b:
        raise ValueError("rewards, weights, grad_sq_norms: expected equal [B] shapes, got "
                         f"{tuple(rewards.shape)}, {tuple(weights.shape)}, {tuple(grad_sq_norms.shape)}")
    if group_ids is None:
        inverse = torch.zeros(b, dtype=torch.long, device=rewards.device)
        n_groups = 1
    else:
        if group_ids.shape != b:
            raise ValueError(f"group_ids: expected shape {tuple(b)}, got {tuple(group_ids.shape)}")
        uniq, inverse = torch.unique(group_ids, return_inverse=True)
        n_groups = uniq.numel()
    r = rewards.detach().double()
    big_w = grad_sq_norms.detach().double() * weights.detach().double() ** 2
    num = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, big_w * r)
    den = torch.zeros(n_groups, dtype=torch.float64, device=r.device).index_add_(0, inverse, big_w)
    return (num / (den + _OPOB_EPS))[inverse].float()
