"""Proximal strategies: how a training step obtains log π_prox (docs/objectives.md).

``PROX_STRATEGIES`` maps each ``trainer.prox`` value to a :class:`ProxStrategy` (base.py); a caller
uses one without branching on its name:

    plan = strategy.plan(behav_logp, versions, current_version, exact_logp)    # once per step
    prox_logp = plan.minibatch(start, stop, behav_logp, logp, versions)         # per update; None = coupled

A new strategy is one file with a ``ProxStrategy`` subclass and one line in ``PROX_STRATEGIES``.
A-3PO is loglinear.py (its math: asyncrl/objectives/a3po.py); loglinear_floor.py and loglinear_ess.py
bound its α from below.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import torch
from torch import Tensor

from asyncrl.core.registry import Registry
from asyncrl.objectives.a3po import apply_loglinear, loglinear_plan, staleness_alpha
from asyncrl.objectives.prox.base import ProxPlan, ProxStrategy
from asyncrl.objectives.prox.behav import Behav
from asyncrl.objectives.prox.linear import Linear
from asyncrl.objectives.prox.loglinear import LogLinear
from asyncrl.objectives.prox.loglinear_ess import LogLinearESS
from asyncrl.objectives.prox.loglinear_floor import LogLinearFloor
from asyncrl.objectives.prox.none import NoProx
from asyncrl.objectives.prox.recompute import Recompute

PROX_STRATEGIES: Registry[ProxStrategy] = Registry("trainer.prox", {
    "recompute": Recompute(),
    "loglinear": LogLinear(),
    "linear": Linear(),
    "behav": Behav(),
    "none": NoProx(),
    "loglinear_floor": LogLinearFloor(),
    "loglinear_ess": LogLinearESS(),
})


def prox_strategy(name: str, params: Mapping[str, object] | None = None) -> ProxStrategy:
    """The strategy registered as ``name``, built with ``params`` when given (its constructor's
    keyword arguments, e.g. ``alpha_min`` of ``loglinear_floor``). ValueError naming the known
    strategies for an unknown name, or naming the parameter and its known ones for a bad one."""
    strategy = PROX_STRATEGIES.lookup(name)
    if not params:
        return strategy
    known = prox_param_names(name)
    for key in params:
        if key not in known:
            raise ValueError(f"{key}: not a parameter of proximal strategy {name!r} "
                             f"(known: {', '.join(known) or 'none'})")
    return type(strategy)(**params)


def prox_param_names(name: str) -> list[str]:
    """The keyword parameters strategy ``name`` takes (its constructor's)."""
    signature = inspect.signature(type(PROX_STRATEGIES[name]).__init__)
    return [p for p in signature.parameters if p != "self"
            and signature.parameters[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]


@torch.no_grad()
def approximate_prox_logp(method: str, behav_logp: Tensor, logp: Tensor, versions: Tensor,
                          current_version: int | Tensor) -> Tensor:
    """log π_prox of one batch by an approximating strategy (``loglinear``, ``linear``, ``behav``, ...):
    the strategy's plan and its one minibatch, the rows the trainer computes.

    behav_logp, logp: [B, T] float (upcast to float32); versions: [B, T] integer; current_version: int.
    Returns [B, T] float32, detached.
    """
    approximations = [name for name, s in PROX_STRATEGIES.items() if s.approximate]
    if method not in approximations:
        raise ValueError(f"method={method!r}: must be one of {', '.join(map(repr, approximations))}")
    if behav_logp.shape != logp.shape or versions.shape != logp.shape:
        raise ValueError(
            f"behav_logp, logp, versions: expected equal [B, T] shapes, got {tuple(behav_logp.shape)}, "
            f"{tuple(logp.shape)}, {tuple(versions.shape)}"
        )
    if versions.is_floating_point() or versions.dtype == torch.bool:
        raise ValueError(f"versions: expected an integer tensor, got {versions.dtype}")
    plan = PROX_STRATEGIES[method].plan(behav_logp, versions, current_version)
    return plan.minibatch(0, len(logp), behav_logp, logp, versions)


__all__ = [
    "PROX_STRATEGIES", "ProxPlan", "ProxStrategy", "apply_loglinear", "approximate_prox_logp",
    "loglinear_plan", "prox_strategy", "staleness_alpha",
]
