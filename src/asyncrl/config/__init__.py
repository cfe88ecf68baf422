"""Typed run configuration: one small dataclass per component, validated at load.

Load order: defaults ← ``--config FILE`` (YAML) ← ``dotted.key=value`` overrides. A section whose
dataclass has a ``name`` field accepts a bare string as shorthand (``task=arithmetic`` ≡
``task.name=arithmetic``). Every error is a :class:`ConfigError` whose message names the key.

A name that picks a registered part (``task.name``, ``run.mode``, ``async.backend``,
``async.weight_channel``, ``rollout.engine``, ``loss.name``) is checked against the registry itself
(:mod:`asyncrl.core.registries`, ``asyncrl.tasks.TASKS``, ``asyncrl.objectives.LOSSES``), after the
modules of ``run.plugins`` are imported (when the ``run`` section is built), so a plugin's names
are accepted like the built-in ones.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncrl.stability.config import check_combinations
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
from asyncrl.config.model import ModelConfig, PolicyConfig, PretrainConfig
from asyncrl.config.run import RunConfig
from asyncrl.config.task import RewardConfig, TaskConfig
from asyncrl.distributed.config import check_ranks
from asyncrl.distributed.world import torchrun_world
from asyncrl.config.training import (EvalConfig, LossConfig, RolloutConfig, TrainerConfig, check_micro_batching,
                                     check_prox_pairing)


@dataclass
class Config:
    """The whole run: one section per component (``run``, ``policy``, ... ``async``)."""

    run: RunConfig = field(default_factory=RunConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
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
        channel, backend = self.async_.weight_channel, self.async_.backend
        if (channel == "ray") != (backend == "ray") and channel not in ("auto", "collective"):
            raise ValueError(f"async.weight_channel: {channel!r} does not work with async.backend={backend!r}")
        check_combinations(self)
        if self.policy.lm_head_fp32 and self.rollout.engine == "vllm":
            raise ValueError("policy.lm_head_fp32: not supported with rollout.engine=vllm (transformers engine only)")
        check_prox_pairing(self.loss, self.trainer)
        ranks = torchrun_world().size  # under torchrun: its world
        check_micro_batching(self.loss, self.trainer, ranks=ranks)
        check_ranks(self, ranks)
        if channel == "cuda" and not self.policy.device.startswith("cuda"):
            raise ValueError(f"async.weight_channel: 'cuda' needs policy.device=cuda, got {self.policy.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _sections_with_name() -> set[str]:
    return {f.name for f in dataclasses.fields(Config)
            if any(sf.name == "name" for sf in dataclasses.fields(f.default_factory()))}


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = (),
                ignore: tuple[str, ...] = ()) -> Config:
    """Defaults ← YAML file ← overrides; raises ConfigError (one line naming the key). The sections
    in ``ignore`` keep their defaults whatever the file and overrides say (``asyncrl plan`` ignores
    ``task`` and ``reward``, which change no memory and may name files it never reads)."""
    data: dict[str, Any] = read_yaml(resolve_config_path(path)) if path else {}
    named = _sections_with_name()
    for text in overrides:
        parts, value = parse_override(text, Config)
        if len(parts) == 1 and parts[0] in named and isinstance(value, str):
            parts = [parts[0], "name"]
        if isinstance(value, dict):
            value = merge({}, value)
        apply_override(data, parts, value)
    _rename_old_keys(data)
    for section in ignore:
        data.pop(section, None)
    return from_dict(Config, data)


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
    "AsyncConfig", "Config", "ConfigError", "EvalConfig", "LossConfig", "ModelConfig", "PolicyConfig",
    "PretrainConfig", "RewardConfig", "RolloutConfig", "RunConfig", "TaskConfig", "TrainerConfig", "load_config",
]
