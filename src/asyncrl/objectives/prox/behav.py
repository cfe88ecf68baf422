"""``behav``: π_prox = π_behav, whatever the staleness (coupled PPO written as a decoupled one: w = 1)."""

from __future__ import annotations

from asyncrl.objectives.prox.base import ProxStrategy


class Behav(ProxStrategy):
    """``behav``: the behavior log-probs, as float32."""

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        return behav_logp.detach().float().clone()
