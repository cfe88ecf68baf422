"""The loss registry: ``LOSSES`` (name -> :class:`LossEntry`), ``policy_loss``, parameter
introspection, and each loss's proximal policy: the one it is meant to run with (``natural_prox``)
and the ones that are consistent with it (``consistent_prox``).

Adding a loss: a frozen keyword-only params dataclass (subclass of ``BaseParams``, validating in
``__post_init__``), a function ``(PreparedInputs, params) -> (loss, stats)``, and one entry in
``LOSSES`` that declares what the loss does with π_prox, which proximal strategy is its natural
one and whether it splits exactly into micro-batches. Inside the package that is one line below;
from outside it, a plugin module named in ``run.plugins`` adds the entry when imported::

    from asyncrl.objectives import LOSSES, PROX_REQUIRED, LossEntry
    LOSSES["mine"] = LossEntry(mine_loss, MineParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear",
                               micro_batch_exact=True)

Config, ``policy_loss``, ``asyncrl train --help`` and the generic tests all read ``LOSSES`` itself.
Every entry is callable with the signature of ``policy_loss`` without ``name``:

    entry(logp, behav_logp, advantages, loss_mask, *, prox_logp=None, versions=None,
          current_version=None, group_ids=None, **params) -> (loss, stats)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Callable

from torch import Tensor

from asyncrl.core.registry import Registry
from asyncrl.objectives.a3po import DecoupledParams, decoupled_loss
from asyncrl.objectives.a3po_seq import A3POSeqParams, a3po_seq_loss
from asyncrl.objectives.cispo import CISPOParams, cispo_loss
from asyncrl.objectives.decoupled_bounded import DecoupledBoundedParams, decoupled_bounded_loss
from asyncrl.objectives.dppo import DPPOKLParams, DPPOParams, dppo_kl_loss, dppo_loss
from asyncrl.objectives.gspo import GSPOParams, gspo_loss
from asyncrl.objectives.is_corrections import MISParams, TISParams, mis_loss, tis_loss
from asyncrl.objectives.m2po import M2POParams, m2po_loss
from asyncrl.objectives.numerics import prepare_inputs
from asyncrl.objectives.opsm import OPSMParams, opsm_loss
from asyncrl.objectives.params import RUNTIME_PARAMS, BaseParams
from asyncrl.objectives.ppo import PPOParams, ppo_loss
from asyncrl.objectives.ppo_kl import PPOKLParams, ppo_kl_loss
from asyncrl.objectives.prox import PROX_STRATEGIES
from asyncrl.objectives.reinforce import REINFORCEParams, reinforce_loss
from asyncrl.objectives.sapo import SAPOParams, sapo_loss
from asyncrl.objectives.spo import SPOParams, spo_loss
from asyncrl.objectives.stats import staleness_stats
from asyncrl.objectives.vaco import VACOParams, vaco_loss
from asyncrl.objectives.vespo import VESPOParams, vespo_loss

LossResult = tuple[Tensor, dict[str, Tensor]]

# What a loss does with π_prox (``LossEntry.reads_prox``):
PROX_REQUIRED = "required"  # built on π_prox: only a strategy that gives one is consistent
PROX_OPTIONAL = "optional"  # π_prox when given (decoupled form), else π_behav (coupled / bypass): any
PROX_NEVER = "never"  # acts on ρ = π_θ/π_behav alone: no strategy that runs a forward pass for nothing
READS_PROX = (PROX_REQUIRED, PROX_OPTIONAL, PROX_NEVER)


@dataclass(frozen=True)
class LossEntry:
    """One registered loss: its function ``(PreparedInputs, params) -> (loss, stats)``, its params
    class, what it does with π_prox (PROX_REQUIRED, PROX_OPTIONAL or PROX_NEVER), its natural
    proximal strategy (a key of PROX_STRATEGIES) and whether it splits exactly into micro-batches.

    Called like ``policy_loss`` without the name: validated params, prepared inputs, staleness stats."""

    fn: Callable[..., LossResult]
    params: type[BaseParams]
    reads_prox: str = PROX_OPTIONAL
    natural_prox: str = "none"
    # True for a loss whose value is a sum of per-token (or per-sequence) terms over the minibatch
    # divided by a count of its loss-mask tokens or sequences: run on micro-batches (or trainer
    # ranks) with the minibatch's counts (global_num_tokens / global_num_seqs), the gradients add up
    # to the minibatch's exactly. False for one that decides on a statistic of the whole call (m2po,
    # vaco), which a micro-batch does not see; config then refuses trainer.micro_batch_size > 0.
    micro_batch_exact: bool = False

    def __post_init__(self) -> None:
        if self.reads_prox not in READS_PROX:
            raise ValueError(f"reads_prox: must be one of {', '.join(READS_PROX)}, got {self.reads_prox!r}")
        if not (isinstance(self.params, type) and issubclass(self.params, BaseParams)):
            raise ValueError(f"params: must be a subclass of BaseParams, got {self.params!r}")

    def __call__(self, logp: Tensor, behav_logp: Tensor, advantages: Tensor, loss_mask: Tensor,
                 **kwargs: Any) -> LossResult:
        name = next((key for key, entry in LOSSES.items() if entry is self), getattr(self.fn, "__name__", "?"))
        return _compute(name, self, logp, behav_logp, advantages, loss_mask, **kwargs)


# name -> entry; a plugin adds its own (module docstring). Listed in the order of --help.
LOSSES: Registry[LossEntry] = Registry("loss.name", {
    "ppo": LossEntry(ppo_loss, PPOParams, micro_batch_exact=True),
    "decoupled": LossEntry(decoupled_loss, DecoupledParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear",
                           micro_batch_exact=True),
    "tis": LossEntry(tis_loss, TISParams, micro_batch_exact=True),
    "mis": LossEntry(mis_loss, MISParams, micro_batch_exact=True),
    "cispo": LossEntry(cispo_loss, CISPOParams, micro_batch_exact=True),
    "opsm": LossEntry(opsm_loss, OPSMParams, micro_batch_exact=True),
    "m2po": LossEntry(m2po_loss, M2POParams, reads_prox=PROX_NEVER),  # the second moment of the whole call
    "gspo": LossEntry(gspo_loss, GSPOParams, micro_batch_exact=True),
    "vaco": LossEntry(vaco_loss, VACOParams, reads_prox=PROX_NEVER),  # a TV estimate of the whole call
    "reinforce": LossEntry(reinforce_loss, REINFORCEParams, reads_prox=PROX_NEVER, micro_batch_exact=True),
    "ppo_kl": LossEntry(ppo_kl_loss, PPOKLParams, micro_batch_exact=True),
    "spo": LossEntry(spo_loss, SPOParams, micro_batch_exact=True),
    "decoupled_bounded": LossEntry(decoupled_bounded_loss, DecoupledBoundedParams, reads_prox=PROX_REQUIRED,
                                   natural_prox="loglinear", micro_batch_exact=True),
    "a3po_seq": LossEntry(a3po_seq_loss, A3POSeqParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear",
                          micro_batch_exact=True),
    # W = Π π_θ/π_behav over the sequence: the whole off-policyness, which TRL's W is too (vespo.py)
    "vespo": LossEntry(vespo_loss, VESPOParams, reads_prox=PROX_NEVER, micro_batch_exact=True),
    # trust region around π_prox if given, else around the rollout policy, the authors' choice (dppo.py)
    "dppo": LossEntry(dppo_loss, DPPOParams, micro_batch_exact=True),
    "dppo_kl": LossEntry(dppo_kl_loss, DPPOKLParams, micro_batch_exact=True),
    # r against π_prox if given, else π_behav: verl's and TRL's old_log_prob in either mode (sapo.py)
    "sapo": LossEntry(sapo_loss, SAPOParams, micro_batch_exact=True),
})


def loss_entry(name: str) -> LossEntry:
    """The entry of loss ``name``; ValueError naming the known losses for an unknown one."""
    return LOSSES.lookup(name)


def natural_prox(loss_name: str) -> str:
    """The proximal strategy (a key of PROX_STRATEGIES, i.e. a ``trainer.prox`` value) loss
    ``loss_name`` is meant to run with: ``loglinear`` (A-3PO) for decoupled, ``none`` for the others."""
    return loss_entry(loss_name).natural_prox


def consistent_prox(loss_name: str) -> tuple[str, ...]:
    """The proximal strategies that make sense with loss ``loss_name``, in registry order."""
    reads = loss_entry(loss_name).reads_prox
    if reads == PROX_NEVER:  # an approximation costs one fused op; a forward pass would be wasted
        return tuple(name for name, strategy in PROX_STRATEGIES.items() if not strategy.needs_forward)
    return tuple(name for name, strategy in PROX_STRATEGIES.items()
                 if reads == PROX_OPTIONAL or strategy.gives_prox == (reads == PROX_REQUIRED))


def prox_pairing_error(loss_name: str, prox: str) -> str | None:
    """Why proximal strategy ``prox`` does not go with loss ``loss_name`` (one line), or None."""
    allowed = consistent_prox(loss_name)
    if prox in allowed:
        return None
    if loss_entry(loss_name).reads_prox == PROX_REQUIRED:
        why = f"the loss is built on π_prox and {prox!r} gives none"
    else:
        why = f"the loss acts on π_θ/π_behav alone, so {prox!r}'s extra forward pass would be computed for nothing"
    natural = f" (its natural one: {natural_prox(loss_name)})" if len(allowed) > 1 else ""
    return f"{why}; use {', '.join(allowed)}{natural}"


def micro_batch_exact_losses() -> list[str]:
    """The registered losses that split exactly into micro-batches (``LossEntry.micro_batch_exact``), sorted."""
    return sorted(name for name, entry in LOSSES.items() if entry.micro_batch_exact)


def validate_loss_params(name: str, params: dict[str, Any]) -> BaseParams:
    """Build the validated params dataclass of loss ``name`` from ``params``.

    Raises ValueError naming the loss if unknown, every unknown parameter, or the first invalid /
    missing parameter. The config layer calls this at load time; policy_loss calls it on every call.
    """
    return _validated(name, loss_entry(name), params)


def _validated(name: str, entry: LossEntry, params: dict[str, Any]) -> BaseParams:
    accepted = [f.name for f in dataclasses.fields(entry.params)]
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"unknown parameter(s) {', '.join(unknown)} for loss {name!r}; accepted: {', '.join(accepted)}"
        )
    try:
        return entry.params(**params)
    except ValueError as err:
        raise ValueError(f"loss {name!r}: {err}") from None


def loss_param_names(name: str) -> dict[str, Any]:
    """{parameter: default} of loss ``name`` for config validation; a required parameter maps to
    ``REQUIRED``. The per-call ``global_num_tokens`` / ``global_num_seqs`` are not config parameters
    and are left out. ``eps_high`` None means "= eps_low"; ``norm_const`` None means the padded T."""
    cls = loss_entry(name).params
    return {f.name: f.default for f in dataclasses.fields(cls) if f.name not in RUNTIME_PARAMS}


class _ParamsByLoss(Mapping[str, dict[str, Any]]):
    """{loss: loss_param_names(loss)} over LOSSES as it is when read, a plugin's losses included."""

    def __getitem__(self, name: str) -> dict[str, Any]:
        if name not in LOSSES:
            raise KeyError(name)
        return loss_param_names(name)

    def __iter__(self) -> Iterator[str]:
        return iter(LOSSES)

    def __len__(self) -> int:
        return len(LOSSES)


LOSS_PARAMS: Mapping[str, dict[str, Any]] = _ParamsByLoss()


def _compute(name: str, entry: LossEntry, logp: Tensor, behav_logp: Tensor, advantages: Tensor,
             loss_mask: Tensor, *, prox_logp: Tensor | None = None, versions: Tensor | None = None,
             current_version: int | None = None, group_ids: Tensor | None = None, **params: Any) -> LossResult:
    cfg = _validated(name, entry, params)
    inp = prepare_inputs(logp, behav_logp, advantages, loss_mask, prox_logp, versions, current_version, group_ids)
    loss, stats = entry.fn(inp, cfg)
    if versions is not None and current_version is not None:
        stats.update(staleness_stats(versions, current_version, inp.valid))
    return loss, {k: v.detach() for k, v in stats.items()}


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
    return _compute(name, loss_entry(name), logp, behav_logp, advantages, loss_mask, prox_logp=prox_logp,
                    versions=versions, current_version=current_version, group_ids=group_ids, **params)
