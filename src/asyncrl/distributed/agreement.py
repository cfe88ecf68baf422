"""Every rank of a torchrun job trains with the same configuration: checked once, when they meet.

Each rank reads its own command line (or ``--resume`` folder), so nothing else keeps a rank from
training on another ``trainer.lr``, or from another ``trainer.n_minibatches`` and so another number
of collectives (a hang, or gloo's abort). Every resolved setting is compared, none exempt: rank 0
names the starting weights and the run directory for all of them, so even a path must agree. One
collective compares digests; only when they differ does a second gather the settings, to name the
first key that differs and which rank has which value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import uuid
from typing import Any

import torch

from asyncrl.core.loader import ConfigError, public_name
from asyncrl.distributed.world import World, hold_off_sigterm

SHOWN = 80  # characters of a value in the error line


def agree(cfg: Any, world: World) -> str:
    """The job's run token (rank 0's, for asyncrl.distributed.liveness), once every rank has been
    found to run ``cfg``'s settings. ConfigError (on every rank) naming the first key that differs."""
    settings = flat_settings(cfg)
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    found: list = [None] * world.size
    torch.distributed.all_gather_object(found, (digest, uuid.uuid4().hex))
    if len({d for d, _ in found}) > 1:
        every: list = [None] * world.size
        torch.distributed.all_gather_object(every, settings)
        hold_off_sigterm()  # the first rank out makes torchrun SIGTERM the others: rank 0 says it first
        raise ConfigError(*disagreement(every))
    return found[0][1]


def flat_settings(obj: Any, prefix: str = "") -> dict[str, str]:
    """{dotted key: the value as JSON} of every setting of a config dataclass, in declaration order.
    A Python object where a name is expected (a reward function given through the API) is shown as
    ``module:qualname``, which is the same on every rank running the same code."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(obj):
        value, key = getattr(obj, f.name), prefix + public_name(f.name)
        if dataclasses.is_dataclass(value):
            out.update(flat_settings(value, key + "."))
        else:
            out[key] = json.dumps(value, sort_keys=True, default=_name_of)
    return out


def disagreement(every: list[dict[str, str]]) -> tuple[str, str]:
    """(the first key whose value differs among the ranks' settings, "ranks disagree: rank 0 has ...")."""
    keys = list(dict.fromkeys(key for settings in every for key in settings))
    differ = [key for key in keys if len({settings.get(key) for settings in every}) > 1]
    key = differ[0]
    holders: dict[str | None, list[int]] = {}
    for rank, settings in enumerate(every):
        holders.setdefault(settings.get(key), []).append(rank)
    said = ", ".join(f"{_ranks(ranks)} {'has' if len(ranks) == 1 else 'have'} {_show(value)}"
                     for value, ranks in holders.items())
    more = f" (and {len(differ) - 1} more: {', '.join(differ[1:4])}{', ...' if len(differ) > 4 else ''})" \
        if len(differ) > 1 else ""
    return key, f"ranks disagree: {said}{more}"


def _ranks(ranks: list[int]) -> str:
    """'rank 3', 'ranks 0, 2', 'ranks 1-7'."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if ranks == list(range(ranks[0], ranks[-1] + 1)) and len(ranks) > 2:
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return "ranks " + ", ".join(map(str, ranks))


def _show(value: str | None) -> str:
    if value is None:
        return "no such key"
    text = value if not value.startswith('"') else json.loads(value)
    return text if len(text) <= SHOWN else text[:SHOWN - 3] + "..."


def _name_of(obj: Any) -> str:
    """A value JSON cannot hold: a function or class by its import name (its repr holds an address,
    which differs between processes), anything else (a Path) as text."""
    if callable(obj):
        return f"{getattr(obj, '__module__', type(obj).__module__)}:{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    return str(obj)
