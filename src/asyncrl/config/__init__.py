"""Typed run configuration: one small dataclass per component, checked at load for what the
config alone can tell (types, ranges, keys that go together).

Load order: defaults ← ``--config FILE`` (YAML) ← ``dotted.key=value`` overrides. A section whose
dataclass has a ``name`` field accepts a bare string as shorthand (``task=arithmetic`` ≡
``task.name=arithmetic``). Every error is a :class:`ConfigError` whose message names the key.

This package is a leaf: it imports asyncrl.core and nothing else of asyncrl, and loading a config
runs no part's code. What needs the parts is the run's: :mod:`asyncrl.runtime.validate` imports the
modules of ``run.plugins``, checks every name that picks a registered part (``task.name``,
``run.mode``, ``loss.name``, ...; ``setting(names=...)``) against its registry, asks the parts
whether they go together, loads the user's reward functions, tools, environment class and harness,
and derives what one section takes from another. Every command that runs a config calls it
(``load_run_config``).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from asyncrl.core.loader import (
    ConfigError,
    apply_override,
    from_dict,
    merge,
    parse_override,
    read_yaml,
    to_dict,
)
from asyncrl.config.presets import resolve_config_path
from asyncrl.config.asynchrony import AsyncConfig
from asyncrl.config.env import EnvConfig
from asyncrl.config.model import ModelConfig, PolicyConfig, PretrainConfig
from asyncrl.config.run import RunConfig
from asyncrl.config.task import RewardConfig, TaskConfig
from asyncrl.config.training import EvalConfig, LossConfig, RolloutConfig, TrainerConfig


@dataclass
class Config:
    """The whole run: one section per component (``run``, ``policy``, ... ``async``)."""

    run: RunConfig = field(default_factory=RunConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)

    def validate(self) -> None:
        if self.rollout.batch_size % self.trainer.n_minibatches:
            raise ValueError(
                f"trainer.n_minibatches: must divide the batch size "
                f"{self.rollout.batch_size} (= rollout.prompts_per_step × samples_per_prompt)")
        unit = self.async_.unit_prompts
        if unit is not None and self.rollout.prompts_per_step % unit:
            raise ValueError("async.unit_prompts: must divide rollout.prompts_per_step")
        if self.async_.lag and self.async_.policy_buffer:
            raise ValueError("async.lag: set either lag or policy_buffer, not both")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _sections_with_name() -> set[str]:
    return {f.name for f in dataclasses.fields(Config)
            if any(sf.name == "name" for sf in dataclasses.fields(f.default_factory()))}


def load_config(source: Any = None, overrides: list[str] | tuple[str, ...] = (), ignore: tuple[str, ...] = (), *,
                settings: Mapping[str, Any] | None = None) -> Config:
    """The one way a :class:`Config` is built: defaults ← ``source`` ← ``settings`` ← ``overrides``.

    ``source``: None, a YAML file or a packaged preset's name, a dict (nested sections or dotted
    keys) or a Config. ``settings``: dotted key → value from Python (``{"trainer.lr": 1e-5}``; a
    value keeps its type). ``overrides``: ``key=value`` strings from a command line, parsed by the
    type of their field. A section with a ``name`` takes a bare string either way
    (``task=gsm8k``). The sections in ``ignore`` keep their defaults whatever is given (``asyncrl
    plan`` ignores ``task`` and ``reward``, which change no memory and may name files it never
    reads). Raises ConfigError (one line naming the key)."""
    data = _source_dict(source)
    for key, value in (settings or {}).items():
        set_key(data, str(key), value)
    for text in overrides:
        parts, value = parse_override(text, Config)
        _set_parts(data, parts, value)
    _rename_old_keys(data)
    for section in ignore:
        data.pop(section, None)
    return from_dict(Config, data)


def _source_dict(source: Any) -> dict[str, Any]:
    if source is None:
        return {}
    if isinstance(source, Config):
        return source.to_dict()
    if isinstance(source, (str, Path)) or hasattr(source, "__fspath__"):
        return read_yaml(resolve_config_path(source))
    if isinstance(source, Mapping):
        data: dict[str, Any] = {}
        for key, value in source.items():
            set_key(data, str(key), value)
        return data
    raise ConfigError("config", f"expected a YAML file, a preset name, a dict or a Config, got {type(source).__name__}")


def set_key(data: dict[str, Any], key: str, value: Any) -> None:
    """``data[a][b] = value`` for the dotted ``key`` ``"a.b"`` (a copy of a mapping value: the
    config never aliases the caller's dict)."""
    parts = key.split(".")
    if any(not part for part in parts):
        raise ConfigError(key, "empty component in dotted key")
    _set_parts(data, parts, value)


def _set_parts(data: dict[str, Any], parts: list[str], value: Any) -> None:
    if len(parts) == 1 and parts[0] in _sections_with_name() and isinstance(value, str):
        parts = [parts[0], "name"]
    if isinstance(value, Mapping):
        value = copy.deepcopy(_plain(value))
    apply_override(data, parts, value)


def _plain(value: Mapping) -> dict:
    return {str(k): _plain(v) if isinstance(v, Mapping) else v for k, v in value.items()}


# old key -> its new name; the old one still loads (run directories saved before keep it)
RENAMED_KEYS = {("task", "max_prompt_tokens"): "max_prompt_length", ("rollout", "vllm_kwargs"): "engine_kwargs"}


def _rename_old_keys(data: dict[str, Any]) -> None:
    for (section, old), new in RENAMED_KEYS.items():
        part = data.get(section)
        if isinstance(part, dict) and old in part:
            if new in part:
                raise ConfigError(f"{section}.{old}", f"renamed to {section}.{new}; set only {section}.{new}")
            part[new] = part.pop(old)


__all__ = [
    "AsyncConfig", "Config", "ConfigError", "EnvConfig", "EvalConfig", "LossConfig", "ModelConfig", "PolicyConfig",
    "PretrainConfig", "RewardConfig", "RolloutConfig", "RunConfig", "TaskConfig", "TrainerConfig", "load_config",
    "set_key",
]
