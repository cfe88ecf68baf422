"""Values a loaded tensor cannot hold: NaN or inf anywhere, and a negative Adam second moment.

Every tensor that enters a run from outside its own computation (a checkpoint's weights and
optimizer state, the cached warm start, weights a rollout worker receives through a channel) is
checked where it enters: a bad value there would otherwise surface steps later as NaN weights and
a sampler's traceback far from its cause. A negative ``exp_avg_sq`` is finite but as bad: AdamW
divides by its square root, so the first update turns the weights to NaN.

:class:`BadTensor` is the one-line error (a ConfigError: exit 2) a caller raises with the file, or
the channel, it names.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from asyncrl.core.loader import ConfigError

_CHUNK = 1 << 24  # elements checked at a time: bounded memory for a large embedding
# Adam's second moments: running means of squared gradients, never below 0
_NON_NEGATIVE = ("exp_avg_sq", "max_exp_avg_sq")
NEGATIVE_MOMENT = "; a second moment is never negative"  # the words that follow such a value


class BadTensor(ConfigError):
    """A loaded tensor holding a value it cannot hold: one line naming where it came from (exit 2)."""

    def __init__(self, message: str, key: str = ""):
        ValueError.__init__(self, message)
        self.key = key


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's part of a DTensor (a sharded optimizer state), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def first_bad_value(name: str, tensor: torch.Tensor) -> str | None:
    """``'<name> holds nan'`` for the first value of ``tensor`` it cannot hold, else None. Integer
    tensors hold no NaN; a tensor named as a second moment may not be negative either."""
    tensor = _local(tensor)
    if not tensor.is_floating_point():
        return None
    non_negative = name.rsplit(".", 1)[-1] in _NON_NEGATIVE
    flat = tensor.detach().reshape(-1)
    for start in range(0, flat.numel(), _CHUNK):
        part = flat[start:start + _CHUNK]
        bad = ~torch.isfinite(part)
        if non_negative:
            bad |= part < 0
        if bool(bad.any()):
            value = part[bad.nonzero()[0, 0]].item()
            negative = math.isfinite(value) and value < 0
            return f"{name} holds {value}" + (NEGATIVE_MOMENT if negative else "")
    return None


def first_bad_in(obj, where: str) -> str | None:
    """:func:`first_bad_value` over every tensor of nested dicts, lists and tuples (a state dict);
    each tensor named by its path from ``where`` (``optimizer.state.3.exp_avg``)."""
    if isinstance(obj, torch.Tensor):
        return first_bad_value(where, obj)
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    for key, value in items:
        found = first_bad_in(value, f"{where}.{key}")
        if found:
            return found
    return None


def first_bad_in_safetensors(path) -> str | None:
    """The first non-finite value of a safetensors file, read one tensor at a time; a torn file
    raises the library's own error (callers name it)."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as fh:
        for key in fh.keys():
            found = first_bad_value(key, fh.get_tensor(key))
            if found:
                return found
    return None


@torch.no_grad()
def first_bad_tensor(named: Iterable[tuple[str, torch.Tensor]]) -> str | None:
    """The first non-finite value among ``named`` tensors (a model's weights after a copy). One norm
    per tensor screens them all at the cost of one read and a single device sync; only a tensor
    whose norm is not finite (NaN, inf, or an overflow of huge finite values) is searched."""
    named = [(name, _local(t)) for name, t in named if _local(t).is_floating_point() and t.numel()]
    if not named:
        return None
    norms = torch._foreach_norm([t for _, t in named])
    finite = torch.isfinite(torch.stack([n.float().to(norms[0].device) for n in norms])).tolist()
    for (name, tensor), ok in zip(named, finite):
        found = None if ok else first_bad_value(name, tensor)
        if found:
            return found
    return None
