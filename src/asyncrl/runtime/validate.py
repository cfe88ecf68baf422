"""The run's check of its config: everything that needs the parts (asyncrl.config checks what the
config alone can tell, and imports nothing above asyncrl.core).

:func:`validate_run` is called wherever a config is loaded for a run: ``asyncrl train`` / ``eval``
/ ``config`` (asyncrl.cli), ``asyncrl.train`` and ``Trainer`` (asyncrl.api, through
:func:`load_run_config`), :func:`asyncrl.runtime.train` itself (a Config built in Python), every
rollout worker (its process rebuilds the config from a dict) and ``asyncrl plan``/``bench``. It
does, in order:

1. imports the modules of ``run.plugins`` (they register parts);
2. checks every name that picks a registered part (``setting(names=...)``: ``run.mode``,
   ``task.name``, ``loss.name``, ...) against its registry, plugins' names included;
3. asks each part about its own settings: the trackers of ``run.report_to``, the task's
   ``config_from``, the loss's params, the proximal strategy's params; loads the reward functions,
   checks the reward model directories, loads the tools, the ``env.factory`` class and the harness
   (file paths made absolute first, so every process and a resume read the same files);
4. derives what one section takes from another, here and nowhere else (a config load rewrites no
   section from another): an ``env.factory`` class with ``get_reward`` adds that reward to
   ``reward.funcs`` (:func:`add_factory_reward`), and a task whose rows follow the environment
   fills its keys from ``env.*`` (:func:`task_follows_env`, ``task.gem_env``);
5. asks the parts whether they go together (:func:`check_parts`, the stability rules, the loss and
   its proximal policy, micro-batching, the torchrun world).

Every step is idempotent: a worker validating the trainer's resolved config gets it back unchanged.
Errors are ConfigErrors naming the key, one line, as at load.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from asyncrl.config import Config, load_config
from asyncrl.config.env import check_episode_budget, check_tool_schemas
from asyncrl.core.loader import ConfigError, check_names, named_errors
from asyncrl.core.registries import BACKENDS, CHANNELS, ENGINES, MODES, auto_channel, device_type

__all__ = ["add_factory_reward", "check_in_process_engine", "check_parts", "import_plugins",
           "load_run_config", "task_follows_env", "validate_run"]



def load_run_config(source: Any = None, overrides: list[str] | tuple[str, ...] = (), ignore: tuple[str, ...] = (),
                    *, settings: Mapping[str, Any] | None = None) -> Config:
    """:func:`asyncrl.config.load_config` (same arguments), then :func:`validate_run`: the config
    of a run, checked against the parts that will run it."""
    return validate_run(load_config(source, overrides, ignore, settings=settings))


def validate_run(cfg: Config) -> Config:
    """``cfg`` checked and resolved for a run (the module's docstring says what, in which order);
    returns it. ConfigError naming the key (one line)."""
    from asyncrl.distributed.world import torchrun_world

    import_plugins(cfg.run.plugins)
    check_names(cfg)
    _check_sections(cfg)
    with named_errors():
        check_parts(cfg)
        check_episode_budget(cfg.env, cfg.rollout.max_new_tokens)
        check_tool_schemas(cfg.env, cfg.policy)
        add_factory_reward(cfg)
        task_follows_env(cfg)
        _check_together(cfg, torchrun_world().size)  # under torchrun: its world
    return cfg


def import_plugins(modules: list[str]) -> None:
    """Import each plugin module (``pkg.module``, importable from ``sys.path``); it registers its
    parts at import. ConfigError ``run.plugins[i]`` (one line) for one that fails to import, calls
    ``sys.exit`` or raises ``KeyboardInterrupt`` while imported (asyncrl.core.user_code, as for a
    reward module): the command then does nothing it was asked to, and must say so."""
    from asyncrl.core.user_code import import_guarded

    for i, name in enumerate(modules):
        try:
            import_guarded(lambda: importlib.import_module(name), name,
                           " (a plugin must be importable: installed, or its directory on PYTHONPATH)")
        except ValueError as err:
            raise ConfigError(f"run.plugins[{i}]", str(err)) from None


def _check_sections(cfg: Config) -> None:
    """Each section's settings that a part judges, sections in the config's order (as at load)."""
    from asyncrl.tasks import task_settings
    from asyncrl.tracking import check_available

    with named_errors("run"):
        check_available(cfg.run.report_to)
    with named_errors("task"):
        task_settings(cfg.task)  # the task's own checks, "field: message" relative to task.
    with named_errors("reward"):
        _check_reward(cfg.reward)
    with named_errors("env"):
        _check_env(cfg.env)
    with named_errors("loss"):
        _check_loss(cfg.loss)
    with named_errors("trainer"):
        _check_prox_params(cfg.trainer)


def _check_reward(reward) -> None:
    """Import every function and check every reward model directory now, in this process (workers
    repeat this from the same strings): a bad path fails before anything starts."""
    from asyncrl.core.import_path import normalize_path
    from asyncrl.rewards.resolve import imports_allowed, load_function
    from asyncrl.rewards.reward_model import check_model_dir, normalize_model_path

    for i, path in enumerate(reward.funcs):
        try:
            reward.funcs[i] = normalize_path(path)  # a file path: absolute, for workers and resumes
            if imports_allowed():  # not while `asyncrl config` only prints the config
                load_function(reward.funcs[i])
        except ValueError as err:
            raise ValueError(f"funcs[{i}]: {err}") from None
    # each reward model directory made absolute and checked without loading its weights (the run
    # loads them, in every process that scores)
    for i, path in enumerate(reward.models):
        reward.models[i] = normalize_model_path(path)
        if imports_allowed():  # not while `asyncrl config` only prints the config
            try:
                check_model_dir(reward.models[i])
            except ValueError as err:
                raise ValueError(f"models[{i}]: {err}") from None


def _check_env(env) -> None:
    """The tools load (a tool that cannot be used fails before any warm start) and their names
    differ; ``env.factory`` names a usable TRL environment class; ``env.harness`` a callable."""
    from asyncrl.agents.python_tool import PythonLimits
    from asyncrl.agents.toolset import load_tools
    from asyncrl.core.import_path import is_file_path, normalize_path
    from asyncrl.rewards.resolve import imports_allowed

    names: dict[str, str] = {}  # tool name -> the key that brings it, for a clash with the factory's
    for i, spec in enumerate(env.tools):
        try:
            if ":" in spec and is_file_path(spec):  # a script's file: absolute, for workers and resumes
                env.tools[i] = spec = normalize_path(spec)
                if not imports_allowed():  # `asyncrl config` runs no user code
                    continue
            loaded = load_tools([spec], python_limits=PythonLimits(sandbox=env.python_sandbox))
        except ValueError as err:
            raise ValueError(f"tools[{i}]: {err}") from None
        for tool in loaded:
            if tool.name in names:  # here, not when the ToolBox is built after the model loads
                raise ValueError(f"tools[{i}]: {spec!r} is named {tool.name!r}, like env.{names[tool.name]}; "
                                 "a call must name one function")
            names[tool.name] = f"tools[{i}]"
    if env.factory:
        _check_factory(env, names, imports_allowed())
    if env.harness:
        _check_harness(env, imports_allowed())


def _check_harness(env, imports: bool) -> None:
    from asyncrl.core.import_path import normalize_path, resolve

    try:
        env.harness = normalize_path(env.harness)
    except ValueError:
        raise ValueError(f"harness: {env.harness!r} is not 'package.module:function' or "
                         "'path/to/file.py:function'") from None
    if imports:
        resolve(env.harness, "harness", need_callable=True)


def _check_factory(env, names: dict[str, str], imports: bool) -> None:
    """Its method tools clash with no tool of ``env.tools`` (a model's call must name one function)."""
    from asyncrl.core.import_path import normalize_path

    try:
        env.factory = normalize_path(env.factory)
    except ValueError:
        raise ValueError(f"factory: {env.factory!r} is not 'package.module:Class' or "
                         "'path/to/file.py:Class'") from None
    if not imports:  # `asyncrl config` runs no user code
        return
    from asyncrl.envs.trl import load_factory

    try:
        _, _, tools = load_factory(env.factory, env.kwargs)
    except ValueError as err:
        raise ValueError(f"factory: {err}") from None
    for tool in tools:
        if tool.name in names:
            raise ValueError(f"factory: {env.factory}.{tool.name} has the name of the tool of "
                             f"env.{names[tool.name]}; a call must name one function")


def _check_loss(loss) -> None:
    from asyncrl.objectives import loss_param_names, validate_loss_params

    known = loss_param_names(loss.name)  # the name is a registered one (check_names ran first)
    for key in loss.params:
        if key not in known:
            raise ValueError(f"params.{key}: not a parameter of loss {loss.name!r} "
                             f"(known: {', '.join(sorted(known))})")
    try:
        validate_loss_params(loss.name, loss.params)
    except ValueError as err:
        raise ValueError(f"params: {err}") from None


def _check_prox_params(trainer) -> None:
    from asyncrl.objectives import prox_strategy

    try:
        prox_strategy(trainer.prox, trainer.prox_params)
    except (TypeError, ValueError) as err:
        raise ValueError(f"prox_params.{err}") from None  # err starts with the parameter's name


def add_factory_reward(cfg: Config) -> None:
    """An ``env.factory`` class with ``get_reward`` is a reward source of weight 1, as TRL's
    ``environment_factory`` makes it: its reward function joins ``reward.funcs`` (alone when none is
    named, so the task's own reward does not score the episode as well), by CLI, file or API alike.
    A derivation of ``reward`` from ``env``: done here, for the run, not when the config loads."""
    from asyncrl.rewards.resolve import imports_allowed

    if not cfg.env.factory or not imports_allowed():  # `asyncrl config` imports no user code
        return
    from asyncrl.envs.trl import GET_REWARD, load_factory

    _, cls, _ = load_factory(cfg.env.factory, cfg.env.kwargs)  # _check_factory has checked it loads
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
    demonstrate, asyncrl.envs.gem); a factory without one is left alone. A derivation of ``task``
    from ``env``: done here, for the run, not when the config loads."""
    from asyncrl.tasks import task_factory

    follow = getattr(task_factory(cfg.task.name), "follow_env", None)
    if follow is not None:
        follow(cfg.task, cfg.env)


def _check_together(cfg: Config, ranks: int) -> None:
    """The rules that span the parts' sections; ValueError("section.key: ...")."""
    from asyncrl.distributed.config import check_ranks
    from asyncrl.objectives.micro_batching import check_micro_batching
    from asyncrl.stability.config import check_combinations

    check_combinations(cfg)
    check_prox_pairing(cfg.loss, cfg.trainer)
    check_micro_batching(cfg.loss, cfg.trainer, ranks=ranks)
    check_ranks(cfg, ranks)
    check_in_process_engine(cfg.rollout, cfg.run.mode, ranks)


def check_prox_pairing(loss, trainer) -> None:
    """ValueError("trainer.prox: ...") unless the proximal strategy goes with the loss
    (asyncrl.objectives.consistent_prox: a decoupled loss needs a proximal policy, a loss that acts on
    π_θ/π_behav alone takes none). Both sections are valid on their own when this runs."""
    from asyncrl.objectives import prox_pairing_error

    why = prox_pairing_error(loss.name, trainer.prox)
    if why is not None:
        raise ValueError(f"trainer.prox: {trainer.prox!r} does not go with loss.name={loss.name!r}: {why}")


def check_in_process_engine(rollout, mode: str, ranks: int) -> None:
    """ValueError("rollout.engine: ...") when a torchrun world of ``ranks`` (> 1) would build vLLM
    inside trainer rank 0: sync and simulated modes generate in the trainer's process, where the
    ranks' process group already exists, and vLLM's own world-group set-up there hangs or fails."""
    if ranks > 1 and ENGINES[rollout.engine].own_world and not MODES[mode].rollout_workers:
        raise ValueError(f"rollout.engine: {rollout.engine} with run.mode={mode} runs inside trainer rank 0, where "
                         f"torchrun's {ranks}-rank process group leaves {rollout.engine} no world of its own; use "
                         f"run.mode=async ({rollout.engine} in rollout workers) or one trainer process")


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
    as_named = not MODES[cfg.run.mode].rollout_workers or BACKENDS[backend].workers_on_trainer_gpu
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
