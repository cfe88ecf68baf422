"""``loglinear_floor``: A-3PO with a floor on the weight of the behavior policy, no extra forward pass.

    α_t = max(1/d_t, α_min)   (α_t = 1 where A-3PO has 1: d_t <= 1 or a token not generated),
    log π_prox = α ℓ_b + (1 − α) sg(ℓ)   ⇒   r = ρ^α,  w = ρ^(1−α),  ρ = π_θ/π_behav.

Why: with α = 1/d the clip on r = ρ^(1/d) only acts once ρ leaves [(1−ε)^d, (1+ε)^d] (up to 18.5 at
d = 16, ε = 0.2). The floor keeps that band at most [(1−ε)^(1/α_min), (1+ε)^(1/α_min)] at every
staleness: [0.41, 2.07] for α_min = 1/4, A-3PO's own band at d = 4. Up to d = 1/α_min the strategy is
A-3PO exactly. The price is bias: π_prox sits closer to π_behav than A-3PO's, so tokens that drifted
far before the step starts are clipped (no gradient) as in coupled PPO, at a milder bound.
"""

from __future__ import annotations

from torch import Tensor

from asyncrl.objectives.params import check_real
from asyncrl.objectives.prox.base import ProxStrategy
from asyncrl.objectives.a3po import apply_loglinear, staleness_alpha


def floored_alpha(versions: Tensor, current_version: int | Tensor, alpha_min: float) -> Tensor:
    """[B, T] float32 max(α_t, α_min) with α_t = :func:`staleness_alpha`. versions: [B, T] integer."""
    return staleness_alpha(versions, current_version).clamp(min=alpha_min)


class LogLinearFloor(ProxStrategy):
    """``loglinear_floor``: A-3PO with α >= ``alpha_min`` (in (0, 1]; 1 is coupled PPO, π_prox = π_behav)."""

    def __init__(self, alpha_min: float = 0.25) -> None:
        check_real("alpha_min", alpha_min, low=0.0, high=1.0, low_open=True)
        self.alpha_min = float(alpha_min)

    def step_rows(self, behav_logp, versions, current_version, exact_logp):
        alpha = floored_alpha(versions, current_version, self.alpha_min)
        return alpha * behav_logp.detach(), 1.0 - alpha

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        base, weights = rows
        return apply_loglinear(base, logp, weights)
