"""The loss registry: ``LOSSES`` (name -> function), ``policy_loss`` and parameter introspection.

Adding a loss: write ``<name>.py`` with a frozen keyword-only params dataclass (subclass of
``BaseParams``, validating in ``__post_init__``) and a function ``(PreparedInputs, params) -> (loss,
stats)``, then add one line to ``_CORES``. The generic tests iterate over ``LOSSES``.

Every value of ``LOSSES`` has the signature of ``policy_loss`` without ``name``:

    fn(logp, behav_logp, advantages, loss_mask, *, prox_logp=None, versions=None,
       current_version=None, group_ids=None, **params) -> (loss, stats)
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from torch import Tensor

from asyncrl.objectives.cispo import CISPOParams, cispo_loss
from asyncrl.objectives.gspo import GSPOParams, gspo_loss
from asyncrl.objectives.is_corrections import MISParams, TISParams, mis_loss, tis_loss
from asyncrl.objectives.m2po import M2POParams, m2po_loss
from asyncrl.objectives.numerics import prepare_inputs
from asyncrl.objectives.opsm import OPSMParams, opsm_loss
from asyncrl.objectives.params import RUNTIME_PARAMS, BaseParams
from asyncrl.objectives.ppo import DecoupledParams, PPOParams, decoupled_loss, ppo_loss
from asyncrl.objectives.ppo_kl import PPOKLParams, ppo_kl_loss
from asyncrl.objectives.prox import staleness_stats
from asyncrl.objectives.reinforce import REINFORCEParams, reinforce_loss
from asyncrl.objectives.spo import SPOParams, spo_loss
from asyncrl.objectives.vaco import VACOParams, vaco_loss

LossResult = tuple[Tensor, dict[str, Tensor]]

_CORES: dict[str, tuple[Callable[..., LossResult], type[BaseParams]]] = {
    "ppo": (ppo_loss, PPOParams),
    "decoupled": (decoupled_loss, DecoupledParams),
    "tis": (tis_loss, TISParams),
    "mis": (mis_loss, MISParams),
    "cispo": (cispo_loss, CISPOParams),
    "opsm": (opsm_loss, OPSMParams),
    "m2po": (m2po_loss, M2POParams),
    "gspo": (gspo_loss, GSPOParams),
    "vaco": (vaco_loss, VACOParams),
    "reinforce": (reinforce_loss, REINFORCEParams),
    "ppo_kl": (ppo_kl_loss, PPOKLParams),
    "spo": (spo_loss, SPOParams),
}


def _params_class(name: str) -> type[BaseParams]:
    if name not in _CORES:
        raise ValueError(f"unknown loss {name!r}; known losses: {', '.join(sorted(_CORES))}")
    return _CORES[name][1]


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
    core, _ = _CORES[name]

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
    loss_fn.__doc__ = f"{core.__doc__}\n\nParameters: {_CORES[name][1].__doc__}"
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
