"""A-3PO (arXiv:2512.06547): the proximal policy as a log-linear interpolation, no extra forward pass.

Staleness: V is the version of the trained weights at the start of the step, v_t the version that
generated token t (−1 for tokens not generated), d_t = V − v_t. The weight on the behavior policy is

    α_t = 1/d_t if d_t >= 1,   α_t = 1 if d_t <= 0 or v_t < 0,

and the proximal log-prob, with ℓ = log π_θ (current, stop-gradient) and ℓ_b = log π_behav,

    log π_prox = α ℓ_b + (1 − α) sg(ℓ),

so the trust-region ratio is r = π_θ/π_prox = ρ^α and the behavior weight w = π_prox/π_behav =
ρ^(1−α), ρ = π_θ/π_behav. On-policy (d = 0) and one-step-stale (d = 1) tokens get π_prox = π_behav
exactly: plain PPO against the behavior policy (A-3PO's text and AReaL's code; the paper's Listing 1
would give π_θ at d = 0, which silently removes the trust region). d < 0 (a future version: a bug or
clock skew) is treated as d = 0 and counted by ``staleness_stats``.

Versions and behavior log-probs are fixed for a step, so the step-constant part (α ℓ_b, 1 − α) is
computed once and each minibatch pays one fused multiply-add: the point of A-3PO is that π_prox
costs nothing next to a forward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asyncrl.objectives.prox.base import ProxStrategy


def staleness_alpha(versions: Tensor, current_version: int | Tensor) -> Tensor:
    """[B, T] float32 weight α_t on the behavior policy (see the module docstring); the only place
    it is computed. versions: [B, T] integer; current_version: int or 0-dim integer tensor."""
    d = current_version - versions.long()
    alpha = 1.0 / d.clamp(min=1).float()
    return torch.where(versions < 0, 1.0, alpha)


def loglinear_plan(behav_logp: Tensor, versions: Tensor, current_version: int | Tensor) -> tuple[Tensor, Tensor]:
    """``(base, weights)``, both [B, T] float32: base = α ℓ_b, weights = 1 − α, so that
    log π_prox = base + weights · sg(ℓ). behav_logp: [B, T] float; versions: [B, T] integer."""
    alpha = staleness_alpha(versions, current_version)
    return alpha * behav_logp.detach(), 1.0 - alpha


def apply_loglinear(base: Tensor, logp: Tensor, weights: Tensor) -> Tensor:
    """log π_prox = base + weights · sg(ℓ), one fused op; rows of a :func:`loglinear_plan`.

    Returns [b, T] float32, detached. Where α = 1 and ℓ is finite this is exactly ℓ_b. A non-finite ℓ
    gives a non-finite result: such a token is outside every loss's valid mask anyway (its ℓ is not
    finite), so no guard is spent on it.
    """
    return torch.addcmul(base, weights, logp.detach().float())


class LogLinear(ProxStrategy):
    """``loglinear``: A-3PO."""

    def step_rows(self, behav_logp, versions, current_version, exact_logp):
        return loglinear_plan(behav_logp, versions, current_version)

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        base, weights = rows
        return apply_loglinear(base, logp, weights)
