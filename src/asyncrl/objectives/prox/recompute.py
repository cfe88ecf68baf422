"""``recompute``: the exact π_prox, the trained weights at the start of the step, from one extra no-grad
forward pass over the batch (decoupled PPO as Hilton et al. 2021 and AReaL run it)."""

from __future__ import annotations

from asyncrl.objectives.prox.base import ProxStrategy


class Recompute(ProxStrategy):
    """``recompute``: the caller's exact log-probs, split by minibatch."""

    needs_forward = True

    def step_rows(self, behav_logp, versions, current_version, exact_logp):
        if exact_logp is None:
            raise ValueError("recompute: needs exact_logp, the log-probs of the weights at the start of the step")
        return (exact_logp,)

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        return rows[0]
