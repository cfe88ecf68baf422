"""VACO's TV-divergence filter (Honari et al., "Align and Filter"; docs/objectives.md).

    TV̂ = ½ mean_j |ρ_j − 1|,   ρ = π_θ/π_behav  (detached, over the valid tokens of the call)
    J  = mean_j ρ̃_j A_j,        ρ̃_j = sg(ρ_j) if TV̂ > δ and point j would increase TV̂, else ρ_j

The surrogate pushes ρ_j up when A_j > 0 and down when A_j < 0, so |ρ_j − 1| grows iff
(ρ_j − 1) A_j > 0, or ρ_j = 1 with A_j ≠ 0 (any move leaves 1). Those points are detached only while
the filter fires; nothing is ever clipped. ``prox_logp`` is not used.

Batch-level statistic: whether the filter fires depends on every token of the call, so micro-batches
can disagree with the whole minibatch; when it fires nowhere (or everywhere) the loss and gradient are
micro-batch invariant with global denominators (tested). Call it on the optimizer minibatch.
The V-trace advantage realignment (§11b) is ``advantages.vtrace``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import BaseParams, check_real
from asyncrl.objectives.stats import common_stats


@dataclass(frozen=True, kw_only=True)
class VACOParams(BaseParams):
    """vaco: delta [0.05] >= 0, the TV threshold (0.05 for GSM8K, 0.2 for MuJoCo in the paper)."""

    delta: float = 0.05

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("delta", self.delta, low=0.0)


def vaco_loss(inp: PreparedInputs, p: VACOParams) -> tuple[Tensor, dict[str, Tensor]]:
    """TV-filtered IS surrogate ρ A. Returns (−J, stats) with ``tv_estimate`` (the TV̂ that was tested),
    ``filter_fired`` (1.0 / 0.0) and ``detached_token_frac``."""
    valid = inp.valid
    log_rho = clamp_log_ratio(inp.logp - inp.behav)
    rho = torch.exp(log_rho)
    lr_d = log_rho.detach()
    tv_hat = 0.5 * ((rho.detach() - 1.0).abs() * inp.valid_f).sum() / inp.tok.n.clamp(min=1)
    fired = tv_hat > p.delta
    increases = valid & (((inp.adv > 0) & (lr_d >= 0)) | ((inp.adv < 0) & (lr_d <= 0)))
    detach = increases & fired
    rho_used = torch.where(detach, rho.detach(), rho)
    loss = -aggregate(rho_used * inp.adv, valid, inp, p)
    stats = common_stats(inp, log_rho, detach, detach)
    stats["tv_estimate"] = tv_hat.detach()
    stats["filter_fired"] = fired.float()
    stats["detached_token_frac"] = inp.tok.frac(detach)
    return loss, stats
