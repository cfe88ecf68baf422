"""``none``: no proximal policy. The loss gets ``prox_logp=None`` and runs its coupled form, anchored
at π_behav (or its bypass form: tis / mis weight REINFORCE by ρ = π_θ/π_behav)."""

from __future__ import annotations

from asyncrl.objectives.prox.base import ProxStrategy


class NoProx(ProxStrategy):
    """``none``: coupled."""

    gives_prox = False

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        return None
