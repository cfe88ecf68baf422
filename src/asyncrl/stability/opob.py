"""Off-policy optimal baseline (OPOB) advantages.

For the importance-weighted estimator Σ_i w_i (R_i − b) g_i, g_i = ∇ log π_θ(τ_i), the scalar
baseline of least variance is b* = Σ_i w_i² ‖g_i‖² R_i / Σ_i w_i² ‖g_i‖² (per prompt group):
sequences that are both up-weighted and move the parameters a lot dominate the variance, so they
set the baseline. The advantages are then (R_i − b*_g) / σ_g ("grpo", σ_g the group's reward std
plus eps) or R_i − b*_g ("drgrpo").

Each ‖g_i‖² needs the score gradient of one sequence: one forward and backward pass per sequence,
at the parameters before the step's first update. (VCPO's single-backward, two-buffer form applies
to objectives linear in the advantage; the objectives here are general, so the baseline is computed
first and the chosen objective is then trained on the resulting advantages.)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from asyncrl.objectives.vcpo import opob_baseline

OPOB_METHODS = ("grpo", "drgrpo")  # rloo is a baseline of its own


def score_grad_sq_norms(seq_logp: Callable[[int], torch.Tensor], params: list[torch.Tensor], n: int) -> torch.Tensor:
    """‖∇_params seq_logp(i)‖² for i < n: [n] float32 on the parameters' device."""
    out = []
    for i in range(n):
        grads = torch.autograd.grad(seq_logp(i), params, allow_unused=True)
        out.append(sum(g.detach().float().pow(2).sum() for g in grads if g is not None))
    return torch.stack(out).float()


def opob_advantages(rewards: torch.Tensor, log_w: torch.Tensor, grad_sq_norms: torch.Tensor,
                    group_ids: torch.Tensor, method: str = "grpo", eps: float = 1e-6) -> torch.Tensor:
    """[B] float32 advantages with the OPOB baseline.

    rewards, log_w (S_i = log w_i), grad_sq_norms: [B] float; group_ids: [B] integer. Weights are
    exponentiated relative to their group's maximum (b* is invariant to a per-group scale), so no
    overflow. A singleton group gets 0, as with the group-mean baseline.
    """
    if method not in OPOB_METHODS:
        raise ValueError(f"method: OPOB supports {', '.join(OPOB_METHODS)}, got {method!r}")
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    log_w = log_w.detach().double()
    top = torch.full((uniq.numel(),), float("-inf"), dtype=torch.float64, device=log_w.device)
    top = top.scatter_reduce(0, inverse, log_w, reduce="amax")
    weights = torch.exp(log_w - top[inverse])
    baseline = opob_baseline(rewards, weights, grad_sq_norms, group_ids).double()
    r = rewards.detach().double()
    count = torch.zeros(uniq.numel(), dtype=torch.float64, device=r.device).index_add_(0, inverse, torch.ones_like(r))
    adv = r - baseline
    if method == "grpo":
        mean = torch.zeros_like(count).index_add_(0, inverse, r) / count
        dev = r - mean[inverse]
        var = torch.zeros_like(count).index_add_(0, inverse, dev * dev) / (count - 1).clamp(min=1)
        adv = adv / (var.sqrt()[inverse] + eps)
    return torch.where(count[inverse] > 1, adv, 0.0).float()
