"""The study's arms as data: which loss from the objectives registry, which advantage estimator,
and whether the advantage is re-estimated every epoch. A new arm is one entry of ``ARMS``.

Advantage estimators (all from ``asyncrl.objectives``) take the rollout in [E, T] layout:
  gae     GAE on the behaviour data as if it were on-policy (what PPO does with stale data).
  vtrace  V-trace targets and policy-gradient advantages of the *learner* π from data of μ:
          A_t = min(ρ̄, π/μ)(r_t + γ v_{t+1} − V(s_t)), v the V-trace value targets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Protocol

from torch import Tensor

from asyncrl.objectives import gae, vtrace


class ArmSettings(Protocol):
    """The fields of a run's ControlConfig that arms read (config.py imports this module, not back)."""

    gae_lambda: float
    vtrace_lambda: float
    clip_coef: float
    kl_coef: float
    tv_delta: float


class AdvantageInputs(NamedTuple):
    """Everything an advantage estimator reads; all [E, T] (bootstrap_value [E]), detached.

    behav_logp: log μ(a|s) recorded by the actors. learner_logp: log π(a|s) under the learner now.
    rewards, values (V of the learner now), discounts: γ, or 0 where the episode ended at t.
    """

    behav_logp: Tensor
    learner_logp: Tensor
    rewards: Tensor
    values: Tensor
    discounts: Tensor
    bootstrap_value: Tensor
    mask: Tensor


def gae_advantages(x: AdvantageInputs, cfg: ArmSettings) -> tuple[Tensor, Tensor]:
    """(advantages, value targets = advantages + values), both [E, T]."""
    return gae(x.rewards, x.values, x.mask, gamma=x.discounts, lam=cfg.gae_lambda,
               bootstrap_value=x.bootstrap_value)


def vtrace_advantages(x: AdvantageInputs, cfg: ArmSettings) -> tuple[Tensor, Tensor]:
    """(V-trace policy-gradient advantages, V-trace value targets), both [E, T]; ρ̄ = c̄ = 1 and
    λ = cfg.vtrace_lambda (1 by default), IMPALA's choices."""
    out = vtrace(x.behav_logp, x.learner_logp, x.rewards, x.values, x.mask, gamma=x.discounts,
                 bootstrap_value=x.bootstrap_value, lam=cfg.vtrace_lambda)
    return out.pg_advantages, out.vs


ADVANTAGES: dict[str, Callable[[AdvantageInputs, ArmSettings], tuple[Tensor, Tensor]]] = {
    "gae": gae_advantages,
    "vtrace": vtrace_advantages,
}


@dataclass(frozen=True)
class Arm:
    """loss: a key of asyncrl.objectives.LOSSES. advantage: a key of ADVANTAGES. reestimate: recompute
    advantages and value targets with the current learner before every gradient step (IMPALA), not
    only once per rollout. params: the loss hyperparameters, read from the run's config.
    single_pass: use each batch once (IMPALA's learner) instead of cfg.update_epochs passes; an
    unclipped policy gradient taken for 10 epochs × 32 minibatches drifts without bound from μ."""

    loss: str
    advantage: str
    reestimate: bool
    params: Callable[[ArmSettings], dict[str, Any]]
    single_pass: bool = False


ARMS: dict[str, Arm] = {
    "ppo": Arm("ppo", "gae", False, lambda c: {"eps_low": c.clip_coef}),
    "ppo_kl": Arm("ppo_kl", "gae", False, lambda c: {"eps_low": c.clip_coef, "kl_coef": c.kl_coef}),
    "spo": Arm("spo", "gae", False, lambda c: {"eps": c.clip_coef}),
    "impala": Arm("reinforce", "vtrace", True, lambda c: {}, single_pass=True),
    "vaco": Arm("vaco", "vtrace", False, lambda c: {"delta": c.tv_delta}),
}
