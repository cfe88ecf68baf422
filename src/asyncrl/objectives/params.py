"""Hyperparameter dataclasses shared by every objective, and the validators they use.

Every loss takes a frozen, keyword-only dataclass of hyperparameters. Validation lives in
``__post_init__`` so that the config layer (``validate_loss_params``) and ``policy_loss`` reject the
same things with the same messages; every message starts with the offending parameter's name.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")

# Per-call values computed by the caller for micro-batch invariance; not hyperparameters, so they are
# accepted by every loss but left out of ``loss_param_names`` (a config file must not pin them).
RUNTIME_PARAMS = ("global_num_tokens", "global_num_seqs")


class _Required:
    """Sentinel default of a parameter that has no default (e.g. OPSM's ``delta``)."""

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()


def check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
    allow_none: bool = False,
) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a finite real number in the given range.

    ``bool`` is rejected on purpose (``True`` is an ``int`` in Python and would slip through as 1).
    """
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r}: must be a finite real number" + (" or None" if allow_none else ""))
    if low is not None and (value < low or (low_open and value == low)):
        raise ValueError(f"{name}={value!r}: must be {'>' if low_open else '>='} {low}")
    if high is not None and (value > high or (high_open and value == high)):
        raise ValueError(f"{name}={value!r}: must be {'<' if high_open else '<='} {high}")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name}={value!r}: must be one of {', '.join(repr(c) for c in choices)}")


def check_bool(name: str, value: Any) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is a bool."""
    if not isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: must be True or False")


def check_count(name: str, value: Any) -> None:
    """A global token/sequence count: None, a non-negative number, or a 0-dim tensor.

    Tensors are not inspected (that would force a device sync); they only need to be scalars.
    """
    if value is None:
        return
    if isinstance(value, torch.Tensor):
        if value.dim() != 0:
            raise ValueError(f"{name}: must be a 0-dim tensor, got shape {tuple(value.shape)}")
        return
    check_real(name, value, low=0.0)


@dataclass(frozen=True, kw_only=True)
class BaseParams:
    """Parameters every loss accepts.

    agg: how the per-token objective is reduced (docs/objectives.md): "token_mean" (Σ m L / Σ m),
        "seq_mean_token_mean" ((1/B') Σ_i mean_t L), "seq_mean_token_sum_norm" (Σ m L / (B' · norm_const)).
    norm_const: the Dr.GRPO constant of "seq_mean_token_sum_norm"; None means the padded length T.
    keep_filtered_in_denominator: filtered tokens (masked, rejected, non-finite) stay in the denominators,
        so filtering removes gradient instead of up-weighting the survivors (docs/objectives.md).
    global_num_tokens / global_num_seqs: denominators over the whole (global) batch, for micro-batch and
        data-parallel invariance; counted from ``loss_mask`` (tokens, and sequences with >= 1 masked-in
        token). None means the local counts.
    """

    agg: str = "token_mean"
    norm_const: float | None = None
    keep_filtered_in_denominator: bool = True
    global_num_tokens: Any = None
    global_num_seqs: Any = None

    def __post_init__(self) -> None:
        check_choice("agg", self.agg, AGG_MODES)
        check_real("norm_const", self.norm_const, low=0.0, low_open=True, allow_none=True)
        check_bool("keep_filtered_in_denominator", self.keep_filtered_in_denominator)
        check_count("global_num_tokens", self.global_num_tokens)
        check_count("global_num_seqs", self.global_num_seqs)


@dataclass(frozen=True, kw_only=True)
class ClipParams(BaseParams):
    """PPO clip parameters (docs/objectives.md).

    eps_low / eps_high: the ratio is clipped to [1 - eps_low, 1 + eps_high]; eps_high None means eps_low.
    dual_clip: c > 1 of dual-clip PPO (applies where A < 0); None disables it.
    """

    eps_low: float = 0.2
    eps_high: float | None = None
    dual_clip: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        check_real("eps_low", self.eps_low, low=0.0, high=1.0, high_open=True)
        check_real("eps_high", self.eps_high, low=0.0, allow_none=True)
        check_real("dual_clip", self.dual_clip, low=1.0, low_open=True, allow_none=True)

    @property
    def eps_high_value(self) -> float:
        """eps_high with its default (= eps_low) resolved."""
        return self.eps_low if self.eps_high is None else self.eps_high
