"""The ESS of a minibatch's sequence importance weights and VCPO's ESS-scaled step size.

Sequence weight w_i = π_θ(τ_i) / π_behav(τ_i) = exp(S_i), S_i = Σ_t (log π_θ − log π_behav) over the
sequence's generated tokens, with log π_θ from the training forward pass (detached) just before
the optimizer step. ESS = (Σ w)² / Σ w², ρ_ess = ESS / B; the step's learning rate is
lr · sqrt(min(1, ρ_ess / ρ_base)) ("sqrt"; "linear" drops the root) and is restored afterwards.
"""

from __future__ import annotations

import contextlib
import math

import torch

from asyncrl.objectives.vcpo import ess, ess_lr_scale


def sequence_log_weights(logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """S_i [B] float32 from logp, behav_logp [B, T] float and mask [B, T] bool (detached)."""
    diff = (logp.detach().float() - behav_logp.float()).masked_fill(~mask, 0.0)
    return diff.sum(-1)


def minibatch_ess(logp: torch.Tensor, behav_logp: torch.Tensor, mask: torch.Tensor,
                  weight_cap: float = 0.0) -> tuple[float, float]:
    """(ESS, ρ_ess) of the minibatch's sequences; ``weight_cap`` > 0 caps w_i first (VCPO's clipped
    variant). Sequences without a generated token do not count; none at all gives (0, 0)."""
    log_w = sequence_log_weights(logp, behav_logp, mask)
    if weight_cap > 0:
        log_w = log_w.clamp(max=math.log(weight_cap))
    value, frac = ess(log_w, mask.any(-1))
    return float(value), float(frac)


@contextlib.contextmanager
def scaled_lr(optimizer: torch.optim.Optimizer, scale: float):
    """Every param group's learning rate times ``scale`` inside the block, restored after it."""
    base = [group["lr"] for group in optimizer.param_groups]
    try:
        for group, lr in zip(optimizer.param_groups, base):
            group["lr"] = lr * scale
        yield
    finally:
        for group, lr in zip(optimizer.param_groups, base):
            group["lr"] = lr


def lr_scale(ess_frac: float, base_ess_ratio: float, rule: str) -> float:
    """The ESS rule's multiplier (0 for a minibatch without valid sequences, as VCPO does)."""
    return float(ess_lr_scale(ess_frac, base_ess_ratio, rule))
