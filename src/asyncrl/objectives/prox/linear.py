"""``linear``: A-3PO's weights applied in probability space instead of log space.

    π_prox = α π_behav + (1 − α) π_θ,   α = staleness_alpha (a3po.py),

evaluated as logaddexp(ℓ_b + log α, sg(ℓ) + log(1 − α)) (no exp overflow), and exactly ℓ_b where
α = 1 (both logs are finite wherever the mixture is selected).
"""

from __future__ import annotations

import torch

from asyncrl.objectives.prox.base import ProxStrategy
from asyncrl.objectives.a3po import staleness_alpha


class Linear(ProxStrategy):
    """``linear``: the probability-space mixture, computed per minibatch."""

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        behav = behav_logp.detach().float()
        alpha = staleness_alpha(versions, current_version)
        mixed = torch.logaddexp(behav + torch.log(alpha), logp.detach().float() + torch.log1p(-alpha))
        return torch.where(alpha == 1.0, behav, mixed)
