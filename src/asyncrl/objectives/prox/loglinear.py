"""``loglinear``: A-3PO's proximal policy as the strategy the trainer calls. The math (the α rule,
the plan, the per-minibatch fused op) is in asyncrl/objectives/a3po.py, with the loss it goes with."""

from __future__ import annotations

from asyncrl.objectives.a3po import apply_loglinear, loglinear_plan, staleness_alpha
from asyncrl.objectives.prox.base import ProxStrategy


class LogLinear(ProxStrategy):
    """``loglinear``: A-3PO. The plan holds (α ℓ_b, 1 − α) for the step; each minibatch adds (1 − α) sg(ℓ)."""

    def step_rows(self, behav_logp, versions, current_version, exact_logp):
        return loglinear_plan(behav_logp, versions, current_version)

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        base, weights = rows
        return apply_loglinear(base, logp, weights)


__all__ = ["LogLinear", "apply_loglinear", "loglinear_plan", "staleness_alpha"]
