"""Pure-torch policy-gradient objectives for stale / off-policy LLM RL (docs/objectives.md).

Public contract:

    prox = approximate_prox_logp(method, behav_logp, logp, versions, current_version)
    loss, stats = policy_loss(name, logp, behav_logp, advantages, loss_mask, *, prox_logp=None,
                              versions=None, current_version=None, group_ids=None, **params)

No model, no I/O, no threads, no config globals: tensors in, tensors out.
"""

from asyncrl.objectives.advantages import VTrace, gae, group_advantages, masked_whiten, vtrace
from asyncrl.objectives.numerics import LOG_RATIO_BOUND
from asyncrl.objectives.params import AGG_MODES, REQUIRED
from asyncrl.objectives.prox import (
    PROX_METHODS,
    apply_loglinear,
    approximate_prox_logp,
    loglinear_plan,
    staleness_alpha,
    staleness_stats,
)
from asyncrl.objectives.registry import LOSS_PARAMS, LOSSES, loss_param_names, policy_loss, validate_loss_params
from asyncrl.objectives.stats import COMMON_STATS
from asyncrl.objectives.vcpo import ess, ess_lr_scale, opob_baseline

__all__ = [
    "AGG_MODES",
    "COMMON_STATS",
    "LOG_RATIO_BOUND",
    "LOSSES",
    "LOSS_PARAMS",
    "PROX_METHODS",
    "REQUIRED",
    "VTrace",
    "apply_loglinear",
    "approximate_prox_logp",
    "ess",
    "ess_lr_scale",
    "gae",
    "group_advantages",
    "loglinear_plan",
    "loss_param_names",
    "masked_whiten",
    "opob_baseline",
    "policy_loss",
    "staleness_alpha",
    "staleness_stats",
    "validate_loss_params",
    "vtrace",
]
