"""The names a run picks its runtime parts by, each mapped to the import path (``"module:attr"``)
of what builds the part: ``run.mode`` → :data:`MODES`, ``async.backend`` → :data:`BACKENDS`,
``async.weight_channel`` → :data:`CHANNELS`, ``rollout.engine`` → :data:`ENGINES`.

These dictionaries are the registries themselves, not copies: config checks a name against them
without importing the runtime, and the runtime imports a part only when it builds one
(:func:`resolve`). Tasks register in ``asyncrl.tasks.TASKS`` and losses in
``asyncrl.objectives.LOSSES``, which sit below config already.

A new part is one file plus one line here. From outside the package, a plugin module adds the
line at import time and is named in ``run.plugins``, which every process of a run (the trainer,
each rollout worker, each bench cell) imports before it checks a name::

    from asyncrl.core.registries import MODES
    MODES["replay"] = "my_pkg.replay:ReplaySource"
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

__all__ = ["BACKENDS", "CHANNELS", "ENGINES", "MODES", "EngineEntry", "import_plugins", "resolve"]

# run.mode -> the batch source: called (cfg, session), a context manager with next_batch, publish, ...
# (docs/runtime.md). Listed in the order `asyncrl train --help` shows them.
MODES: dict[str, str] = {
    "sync": "asyncrl.runtime.sources.lockstep:sync_source",
    "async": "asyncrl.runtime.sources.async_source:AsyncSource",
    "simulated": "asyncrl.runtime.sources.lockstep:simulated_source",
}

# async.backend -> called (cfg, worker specs, model), returns (worker pool, weight channel)
BACKENDS: dict[str, str] = {
    "local": "asyncrl.runtime.backends:local_pool",
    "ray": "asyncrl.runtime.backends:ray_pool",
}

# async.weight_channel -> called (model, ctx=, device=, dtype=), returns a WeightChannel; "auto"
# picks one of these from the device and the backend (asyncrl.runtime.channels.channel_name)
CHANNELS: dict[str, str] = {
    "shm": "asyncrl.runtime.channels.flat:open_shm",
    "cuda": "asyncrl.runtime.channels.flat:open_cuda",
    "ray": "asyncrl.runtime.channels.ray_store:open_ray",
    "collective": "asyncrl.runtime.channels.collective:open_collective",
}


@dataclass(frozen=True)
class EngineEntry:
    # "module:function" called (spec, model=, tokenizer=, policy_dir=, engine_kwargs=) -> Engine
    target: str
    # True: the engine loads its weights from the checkpoint and keeps them itself (vLLM), so
    # pulled weights land in a staging model on policy.device first; False: it generates with the nn.Module it
    # is given (which weight channels fill directly)
    owns_weights: bool


# rollout.engine -> its entry (the protocol: asyncrl.rollout.base.Engine)
ENGINES: dict[str, EngineEntry] = {
    "transformers": EngineEntry("asyncrl.rollout.hf_engine:build", owns_weights=False),
    "vllm": EngineEntry("asyncrl.rollout.vllm_engine:build", owns_weights=True),
}


def resolve(path: str) -> Any:
    """The object that ``"module:attr"`` names, its module imported now."""
    module, _, attr = path.partition(":")
    target: Any = importlib.import_module(module)
    for part in attr.split("."):
        target = getattr(target, part)
    return target


def import_plugins(modules: list[str]) -> None:
    """Import each plugin module (``pkg.module``, importable from ``sys.path``); it registers its
    parts at import. ValueError ``"[i]: ..."`` (one line) for one that fails."""
    for i, name in enumerate(modules):
        try:
            importlib.import_module(name)
        except Exception as err:  # a user's module may fail to import with anything
            reason = (str(err).strip().splitlines() or [""])[0][:200]
            hint = " (a plugin must be importable: installed, or its directory on PYTHONPATH)" \
                if isinstance(err, ModuleNotFoundError) else ""
            raise ValueError(f"[{i}]: cannot import {name!r}: {type(err).__name__}: {reason}{hint}") from None
