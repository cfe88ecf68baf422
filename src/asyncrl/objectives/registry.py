"""The loss registry: ``LOSSES`` (name -> function), ``policy_loss``, parameter introspection, and
each loss's proximal policy: the one it is meant to run with (``natural_prox``) and the ones that are
consistent with it (``consistent_prox``).

Adding a loss: write ``<name>.py`` with a frozen keyword-only params dataclass (subclass of
``BaseParams``, validating in ``__post_init__``) and a function ``(PreparedInputs, params) -> (loss,
stats)``, then add one line to ``_CORES`` saying what the loss does with π_prox and which proximal
strategy is its natural one. The generic tests iterate over ``LOSSES``.

Every value of ``LOSSES`` has the signature of ``policy_loss`` without ``name``:

    fn(logp, behav_logp, advantages, loss_mask, *, prox_logp=None, versions=None,
       current_version=None, group_ids=None, **params) -> (loss, stats)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable

from torch import Tensor

from asyncrl.objectives.a3po_seq import A3POSeqParams, a3po_seq_loss
from asyncrl.objectives.cispo import CISPOParams, cispo_loss
from asyncrl.objectives.decoupled_bounded import DecoupledBoundedParams, decoupled_bounded_loss
from asyncrl.objectives.gspo import GSPOParams, gspo_loss
from asyncrl.objectives.is_corrections import MISParams, TISParams, mis_loss, tis_loss
from asyncrl.objectives.m2po import M2POParams, m2po_loss
from asyncrl.objectives.numerics import prepare_inputs
from asyncrl.objectives.opsm import OPSMParams, opsm_loss
from asyncrl.objectives.params import RUNTIME_PARAMS, BaseParams
from asyncrl.objectives.ppo import DecoupledParams, PPOParams, decoupled_loss, ppo_loss
from asyncrl.objectives.ppo_kl import PPOKLParams, ppo_kl_loss
from asyncrl.objectives.prox import PROX_STRATEGIES
from asyncrl.objectives.reinforce import REINFORCEParams, reinforce_loss
from asyncrl.objectives.spo import SPOParams, spo_loss
from asyncrl.objectives.stats import staleness_stats
from asyncrl.objectives.vaco import VACOParams, vaco_loss

LossResult = tuple[Tensor, dict[str, Tensor]]

# What a loss does with π_prox (``LossEntry.reads_prox``):
PROX_REQUIRED = "required"  # built on π_prox: only a strategy that gives one is consistent
PROX_OPTIONAL = "optional"  # π_prox when given (decoupled form), else π_behav (coupled / bypass): any
PROX_NEVER = "never"  # acts on ρ = π_θ/π_behav alone: no strategy that runs a forward pass for nothing


@dataclass(frozen=True)
class LossEntry:
    """One registered loss: its function, its params class, what it does with π_prox (PROX_REQUIRED,
    PROX_OPTIONAL or PROX_NEVER) and its natural proximal strategy (a key of PROX_STRATEGIES)."""

    fn: Callable[..., LossResult]
    params: type[BaseParams]
    reads_prox: str = PROX_OPTIONAL
    natural_prox: str = "none"


_CORES: dict[str, LossEntry] = {
    "ppo": LossEntry(ppo_loss, PPOParams),
    "decoupled": LossEntry(decoupled_loss, DecoupledParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear"),
    "tis": LossEntry(tis_loss, TISParams),
    "mis": LossEntry(mis_loss, MISParams),
    "cispo": LossEntry(cispo_loss, CISPOParams),
    "opsm": LossEntry(opsm_loss, OPSMParams),
    "m2po": LossEntry(m2po_loss, M2POParams, reads_prox=PROX_NEVER),
    "gspo": LossEntry(gspo_loss, GSPOParams),
    "vaco": LossEntry(vaco_loss, VACOParams, reads_prox=PROX_NEVER),
    "reinforce": LossEntry(reinforce_loss, REINFORCEParams, reads_prox=PROX_NEVER),
    "ppo_kl": LossEntry(ppo_kl_loss, PPOKLParams),
    "spo": LossEntry(spo_loss, SPOParams),
    "decoupled_bounded": LossEntry(decoupled_bounded_loss, DecoupledBoundedParams, reads_prox=PROX_REQUIRED,
                                   natural_prox="loglinear"),
    "a3po_seq": LossEntry(a3po_seq_loss, A3POSeqParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear"),
}


def _entry(name: str) -> LossEntry:
    if name not in _CORES:
        raise ValueError(f"unknown loss {name!r}; known losses: {', '.join(sorted(_CORES))}")
    return _CORES[name]


def natural_prox(loss_name: str) -> str:
    """The proximal strategy (a key of PROX_STRATEGIES, i.e. a ``trainer.prox`` value) loss
    ``loss_name`` is meant to run with: ``loglinear`` (A-3PO) for decoupled, ``none`` for the others."""
    return _entry(loss_name).natural_prox


def consistent_prox(loss_name: str) -> tuple[str, ...]:
    """The proximal strategies that make sense with loss ``loss_name``, in registry order."""
    reads = _entry(loss_name).reads_prox
    if reads == PROX_NEVER:  # an approximation costs one fused op; a forward pass would be wasted
        return tuple(name for name, strategy in PROX_STRATEGIES.items() if not strategy.needs_forward)
    return tuple(name for name, strategy in PROX_STRATEGIES.items()
                 if reads == PROX_OPTIONAL or strategy.gives_prox == (reads == PROX_REQUIRED))


def prox_pairing_error(loss_name: str, prox: str) -> str | None:
    """Why proximal strategy ``prox`` does not go with loss ``loss_name`` (one line), or None."""
    allowed = consistent_prox(loss_name)
    if prox in allowed:
        return None
    if _entry(loss_name).reads_prox == PROX_REQUIRED:
        why = f"the loss is built on π_prox and {prox!r} gives none"
    else:
        why = f"the loss acts on π_θ/π_behav alone, so {prox!r}'s extra forward pass would be computed for nothing"
    natural = f" (its natural one: {natural_prox(loss_name)})" if len(allowed) > 1 else ""
    return f"{why}; use {', '.join(allowed)}{natural}"


def _params_class(name: str) -> type[BaseParams]:
    return _entry(name).params


def validate_loss_params(name: str, params: dict[str, Any]) -> BaseParams:
    """Build the validated params dataclass of loss ``name`` from ``params``.

    Raises ValueError naming the loss if unknown, every unknown parameter, or the first invalid /
    missing parameter. The config layer calls this at load time; policy_loss calls it on every call.
    """
    cls = _params_class(name)
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for loss {name!r}; accepted: {', '.join(accepted)}"
        )
    try:
        return cls(**params)
    except ValueError as err:
        raise ValueError(f"loss {name!r}: {err}") from None


def loss_param_names(name: str) -> dict[str, Any]:
    """{parameter: default} of loss ``name`` for config validation; a required parameter maps to
    ``REQUIRED``. The per-call ``global_num_tokens`` / ``global_num_seqs`` are not config parameters
    and are left out. ``eps_high`` None means "= eps_low"; ``norm_const`` None means the padded T."""
    cls = _params_class(name)
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name not in RUNTIME_PARAMS}


def _make_loss(name: str) -> Callable[..., LossResult]:
    core = _CORES[name].fn

    def loss_fn(
        logp: Tensor,
        behav_logp: Tensor,
        advantages: Tensor,
        loss_mask: Tensor,
        *,
        prox_logp: Tensor | None = None,
        versions: Tensor | None = None,
        current_version: int | None = None,
        group_ids: Tensor | None = None,
        **params: Any,
    ) -> LossResult:
        cfg = validate_loss_params(name, params)
        inp = prepare_inputs(logp, behav_logp, advantages, loss_mask, prox_logp, versions, current_version, group_ids)
        loss, stats = core(inp, cfg)
        if versions is not None and current_version is not None:
            stats.update(staleness_stats(versions, current_version, inp.valid))
        return loss, {k: v.detach() for k, v in stats.items()}

    loss_fn.__name__ = f"{name}_loss"
    loss_fn.__qualname__ = loss_fn.__name__
    loss_fn.__doc__ = f"{core.__doc__}\n\nParameters: {_CORES[name].params.__doc__}"
    return loss_fn


LOSSES: dict[str, Callable[..., LossResult]] = {name: _make_loss(name) for name in _CORES}
LOSS_PARAMS: dict[str, dict[str, Any]] = {name: loss_param_names(name) for name in _CORES}


def policy_loss(
    name: str,
    logp: Tensor,
    behav_logp: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    *,
    prox_logp: Tensor | None = None,
    versions: Tensor | None = None,
    current_version: int | None = None,
    group_ids: Tensor | None = None,
    **params: Any,
) -> LossResult:
    """Compute loss ``name`` (a key of LOSSES). Returns (loss, stats).

    logp: [B, T] float log π_θ of the sampled tokens (requires grad). behav_logp: [B, T] float log
    π_behav recorded by the inference engine. advantages: [B, T] or [B] float (broadcast over T).
    loss_mask: [B, T] bool. prox_logp: [B, T] float log π_prox (no grad) or None (coupled / bypass).
    versions: [B, T] integer policy version per token (−1 = not generated); current_version: int.
    group_ids: [B] integer prompt ids (validated, reserved; no current loss reads them).
    params: the loss's hyperparameters (``loss_param_names(name)``) plus ``global_num_tokens`` /
    ``global_num_seqs``. Unknown or invalid parameters raise ValueError naming them.
    loss: 0-dim float32, differentiable w.r.t. logp (−J, to minimize). stats: dict of detached 0-dim
    tensors (stats.py documents the names); with versions and current_version also staleness_*.
    Tokens of loss_mask with a non-finite log-prob or advantage are dropped and counted.
    """
    if name not in LOSSES:
        raise ValueError(f"unknown loss {name!r}; known losses: {', '.join(sorted(LOSSES))}")
    return LOSSES[name](
        logp, behav_logp, advantages, loss_mask, prox_logp=prox_logp, versions=versions,
        current_version=current_version, group_ids=group_ids, **params,
    )
