"""Typed run configuration: one small dataclass per component, validated at load.

Load order: defaults ← ``--config FILE`` (YAML) ← ``dotted.key=value`` overrides. A section whose
dataclass has a ``name`` field accepts a bare string as shorthand (``task=arithmetic`` ≡
``task.name=arithmetic``). Every error is a :class:`ConfigError` whose message names the key.

A name that picks a registered part (``task.name``, ``run.mode``, ``async.backend``,
``async.weight_channel``, ``rollout.engine``, ``loss.name``, ``trainer.prox``, ``run.report_to``) is
checked against the registry itself (:mod:`asyncrl.core.registries`, ``asyncrl.tasks.TASKS``,
``asyncrl.objectives.LOSSES`` and ``PROX_STRATEGIES``, ``asyncrl.tracking.TRACKERS``), after the
modules of ``run.plugins`` are imported (when the ``run`` section is built), so a plugin's names
are accepted like the built-in ones. Whether the named parts go together is asked of their entries
(:func:`check_parts`, the loss's own checks in config/training.py), never decided by a name.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Mapping
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
from asyncrl.config.env import EnvConfig, check_episode_budget, check_tool_schemas
from asyncrl.config.model import ModelConfig, PolicyConfig, PretrainConfig
from asyncrl.config.run import RunConfig
from asyncrl.config.task import RewardConfig, TaskConfig
from asyncrl.core.registries import BACKENDS, CHANNELS, ENGINES, auto_channel, device_type
from asyncrl.distributed.config import check_ranks
from asyncrl.distributed.world import torchrun_world
from asyncrl.tasks import task_factory
from asyncrl.config.training import (IN_PROCESS_MODES, EvalConfig, LossConfig, RolloutConfig, TrainerConfig,
                                     check_in_process_engine, check_micro_batching, check_prox_pairing)


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
        check_parts(self)
        check_episode_budget(self.env, self.rollout.max_new_tokens)
        check_tool_schemas(self.env, self.policy)
        add_factory_reward(self)
        task_follows_env(self)
        check_combinations(self)
        check_prox_pairing(self.loss, self.trainer)
        ranks = torchrun_world().size  # under torchrun: its world
        check_micro_batching(self.loss, self.trainer, ranks=ranks)
        check_ranks(self, ranks)
        check_in_process_engine(self.rollout, self.run.mode, ranks)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def add_factory_reward(cfg: Config) -> None:
    """An ``env.factory`` class with ``get_reward`` is a reward source of weight 1, as TRL's
    ``environment_factory`` makes it: its reward function joins ``reward.funcs`` (alone when none is
    named, so the task's own reward does not score the episode as well), by CLI, file or API alike."""
    from asyncrl.rewards.resolve import imports_allowed

    if not cfg.env.factory or not imports_allowed():  # `asyncrl config` imports no user code
        return
    from asyncrl.envs.trl import GET_REWARD, load_factory

    _, cls, _ = load_factory(cfg.env.factory, cfg.env.kwargs)  # env.validate has checked it loads
    reward = cfg.reward
    if getattr(cls, "get_reward", None) is None or GET_REWARD in reward.funcs:
        return
    if reward.weights is not None and len(reward.weights) == len(reward.funcs) + len(reward.models):
        # weights go functions first, then models: the new function's comes after the functions'
        reward.weights = [*reward.weights[:len(reward.funcs)], 1.0, *reward.weights[len(reward.funcs):]]
    reward.funcs = [*reward.funcs, GET_REWARD]


def task_follows_env(cfg: Config) -> None:
    """A task whose rows depend on the episodes' environment reads ``env.*`` into its own section,
    by its factory's ``follow_env(task section, env section)`` (``task=gem``: the game its train rows
    demonstrate, asyncrl.envs.gem); a factory without one is left alone."""
    follow = getattr(task_factory(cfg.task.name), "follow_env", None)
    if follow is not None:
        follow(cfg.task, cfg.env)


def check_parts(cfg: Config) -> None:
    """The registered parts a run names work together and with ``policy.device``: each entry of
    asyncrl.core.registries declares what it needs and supports, and is asked (no part is named
    here). ValueError("section.key: ..."), one line."""
    device, backend, channel = cfg.policy.device, cfg.async_.backend, cfg.async_.weight_channel
    engine_name, engine = cfg.rollout.engine, ENGINES[cfg.rollout.engine]
    if engine.devices is not None and device_type(device) not in engine.devices:
        raise ValueError(f"rollout.engine: {engine_name!r} runs on policy.device="
                         f"{'|'.join(sorted(engine.devices))} only, got {device!r}")
    index = device.partition(":")[2]
    # where the engine's process sees the GPUs as the trainer does: its own process, a local worker
    # (a Ray actor is shown its own GPU as cuda)
    as_named = cfg.run.mode in IN_PROCESS_MODES or BACKENDS[backend].workers_on_trainer_gpu
    if engine.first_gpu_only and device_type(device) == "cuda" and index not in ("", "0") and as_named:
        raise ValueError(f"policy.device: {device!r} with rollout.engine={engine_name}, which runs on its "
                         f"process's first visible GPU: run with CUDA_VISIBLE_DEVICES={index} (or a list "
                         "starting with it) and policy.device=cuda")
    if cfg.policy.lm_head_fp32 and not engine.lm_head_fp32:
        able = [name for name, entry in ENGINES.items() if entry.lm_head_fp32]
        raise ValueError(f"policy.lm_head_fp32: not supported with rollout.engine={engine_name} "
                         f"(engines that support it: {', '.join(able) or 'none'})")
    if channel == "auto":
        if auto_channel(backend, device) is None:
            tried = ", ".join(BACKENDS[backend].auto_channels) or "none"
            raise ValueError(f"async.weight_channel: auto finds no channel for async.backend={backend!r} on "
                             f"policy.device={device!r} (tried: {tried}); name one")
        return
    why = CHANNELS[channel].refuses(backend, device)
    if why is not None:
        raise ValueError(f"async.weight_channel: {channel!r} {why}")
    places_workers = not BACKENDS[backend].workers_on_trainer_gpu  # by GPU share (Ray's actors)
    if CHANNELS[channel].own_gpu and device_type(device) == "cuda" and places_workers \
            and cfg.async_.gpus_per_worker < 1:
        share = cfg.async_.gpus_per_worker or f"auto, 1/{cfg.async_.n_workers + 1}"
        raise ValueError(f"async.weight_channel: {channel!r} needs each rollout actor on a GPU of its own (NCCL "
                         f"refuses two ranks on one GPU), but async.gpus_per_worker={share} puts it on a GPU it "
                         "shares; set async.gpus_per_worker=1, or use async.weight_channel=ray")


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
