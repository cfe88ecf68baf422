"""Pure-torch policy-gradient objectives for stale / off-policy LLM RL (docs/objectives.md).

Public contract:

    plan = PROX_STRATEGIES[prox].plan(behav_logp, versions, current_version, exact_logp)  # per step
    prox_logp = plan.minibatch(start, stop, behav_logp, logp, versions)                    # per update
    loss, stats = policy_loss(name, logp, behav_logp, advantages, loss_mask, *, prox_logp=None,
                              versions=None, current_version=None, group_ids=None, **params)

``approximate_prox_logp(method, ...)`` is the plan and its one minibatch for a whole batch;
``natural_prox(name)`` / ``consistent_prox(name)`` say which proximal strategies go with a loss.
``LOSSES`` maps each ``loss.name`` to a :class:`LossEntry`; a plugin registers a loss by adding one
(registry.py).

No model, no I/O, no threads, no config globals: tensors in, tensors out.
"""

from asyncrl.objectives.advantages import VTrace, episode_advantages, gae, group_advantages, masked_whiten, vtrace
from asyncrl.objectives.numerics import LOG_RATIO_BOUND
from asyncrl.objectives.params import AGG_MODES, REQUIRED
from asyncrl.objectives.prox import (
    PROX_STRATEGIES,
    ProxPlan,
    ProxStrategy,
    apply_loglinear,
    approximate_prox_logp,
    loglinear_plan,
    prox_strategy,
    staleness_alpha,
)
from asyncrl.objectives.registry import (
    LOSS_PARAMS,
    LOSSES,
    PROX_NEVER,
    PROX_OPTIONAL,
    PROX_REQUIRED,
    LossEntry,
    consistent_prox,
    loss_param_names,
    micro_batch_exact_losses,
    natural_prox,
    policy_loss,
    prox_pairing_error,
    validate_loss_params,
)
from asyncrl.objectives.stats import COMMON_STATS, staleness_stats
from asyncrl.objectives.vcpo import ess, ess_lr_scale, opob_baseline

__all__ = [
    "AGG_MODES",
    "COMMON_STATS",
    "LOG_RATIO_BOUND",
    "LOSSES",
    "LOSS_PARAMS",
    "PROX_NEVER",
    "PROX_OPTIONAL",
    "PROX_REQUIRED",
    "PROX_STRATEGIES",
    "LossEntry",
    "ProxPlan",
    "ProxStrategy",
    "REQUIRED",
    "VTrace",
    "apply_loglinear",
    "approximate_prox_logp",
    "consistent_prox",
    "ess",
    "ess_lr_scale",
    "gae",
    "episode_advantages",
    "group_advantages",
    "loglinear_plan",
    "loss_param_names",
    "masked_whiten",
    "micro_batch_exact_losses",
    "natural_prox",
    "opob_baseline",
    "policy_loss",
    "prox_pairing_error",
    "prox_strategy",
    "staleness_alpha",
    "staleness_stats",
    "validate_loss_params",
    "vtrace",
]
