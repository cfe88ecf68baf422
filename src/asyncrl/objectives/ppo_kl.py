"""PPO clip plus a KL penalty against the anchor policy (the "PPO-KL penalty" baseline).

    J_t = PPOclip(r_t, A_t) − β · k3_t,   k3 = (r − 1) − log r,   r = π_θ/π_anchor

k3 is the non-negative, unbiased per-sample estimator of KL(π_anchor‖π_θ) on samples drawn from
π_anchor (π_prox when given, else π_behav, the policy that sampled). Its gradient is (r − 1) ∇log π_θ:
zero at r = 1, so on fresh on-policy data the first step equals plain PPO, and growing as the
policy drifts from the sampler. β = 0 is ``ppo``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from asyncrl.objectives.numerics import PreparedInputs, aggregate, clamp_log_ratio
from asyncrl.objectives.params import ClipParams, check_real
from asyncrl.objectives.ppo import anchor_logp, clipped_surrogate
from asyncrl.objectives.stats import clip_stats, common_stats


@dataclass(frozen=True, kw_only=True)
class PPOKLParams(ClipParams):
    """ppo_kl: ClipParams plus kl_coef [1.0] >= 0, the weight β of the k3 KL penalty."""

    kl_coef: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("kl_coef", self.kl_coef, low=0.0)


def ppo_kl_loss(inp: PreparedInputs, p: PPOKLParams) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate minus β · k3(π_anchor‖π_θ). Returns (−J, stats) with ``kl_penalty``."""
    log_r = clamp_log_ratio(inp.logp - anchor_logp(inp))
    clip = clipped_surrogate(log_r, inp.adv, p.eps_low, p.eps_high_value, p.dual_clip)
    k3 = torch.expm1(log_r) - log_r
    loss = -aggregate(clip.objective - p.kl_coef * k3, inp.valid, inp, p)
    stats = common_stats(inp, log_r, clip.clipped, torch.zeros_like(inp.valid))
    stats.update(clip_stats(clip.upper, clip.lower, clip.dual, inp.tok))
    stats["kl_penalty"] = inp.tok.mean(k3.detach())
    return loss, stats
