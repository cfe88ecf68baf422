"""``asyncrl.Trainer(...).train()`` and ``asyncrl.train(...)``: training from Python, the way a TRL
user calls ``GRPOTrainer``.

    import asyncrl

    def short(completions, **kwargs):
        return [-len(c) / 100 for c in completions]

    summary = asyncrl.train("sync", reward_funcs=[short], train_dataset=ds, trainer__steps=20)

The same config keys as the command line (docs/config.md), given as a file or preset name, a dict
of dotted keys (``{"trainer.steps": 20}``) or a :class:`~asyncrl.config.Config`, then overridden
by ``overrides`` (a dict of dotted keys) and keyword arguments (``trainer__steps=20``: ``__`` stands
for the dot). Values are Python values, checked against the fields' types as a YAML file's are.

What this adds to the config, so that rollout worker processes (spawned, or Ray actors) get it too:

* ``train_dataset`` / ``eval_dataset``: a ``datasets.Dataset``, a list of dicts, or a path. An
  in-memory one is written once (Parquet, or JSON lines for a list) under
  ``<run.out_dir>/.inputs/``, named by its content, and becomes ``task.path`` / ``task.eval_path``;
  with no task named, the generic ``dataset`` task reads it (asyncrl.tasks.generic).
* ``reward_funcs``: functions or ``"module:function"`` strings, into ``reward.funcs``. A function
  importable by its module and name travels as that reference; any other (defined in the script,
  a closure, a lambda) is pickled by value with cloudpickle into ``.inputs/`` and loaded from there
  in every process. One that cannot travel is refused here, in one line (a ConfigError). A reward
  model (TRL's model in ``reward_funcs``) goes to ``reward.models``: a string naming a directory, or
  a ``PreTrainedModel`` (or ``(model, tokenizer)``) saved once under ``.inputs/``; ``reward.weights``
  given here follow the list's order, as TRL's ``reward_weights`` do.
* ``environment_factory`` / ``tools``: TRL's ``GRPOTrainer`` arguments, into ``env.factory`` /
  ``env.tools``, travelling the same way (a class or function from the script is pickled). The
  factory's class is checked here (``reset``, every public method a tool) and, when it defines
  ``get_reward``, the reward function ``asyncrl.envs.trl:get_reward`` joins ``reward.funcs``
  with weight 1, as TRL adds it: without other reward functions it is the only reward.
* ``harness``: an agent loop over an OpenAI client, ``agent(session)`` (docs/harness.md), into
  ``env.harness``, travelling the same way.
* ``peft_config``: a ``peft.LoraConfig``, into ``policy.lora_*`` (asyncrl.policy.lora.lora_settings);
  what the run would not honour is refused.

``callbacks`` stay in this process (nothing pickled): the training loop calls them
(asyncrl.runtime.callbacks).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import re
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from asyncrl.core.errors import AsyncRLError
from asyncrl.core.import_path import resolve
from asyncrl.core.loader import ConfigError
from asyncrl.core.user_code import first_line
from asyncrl.runtime.callbacks import CallbackError

# the exception family a run raises (docs/python-api.md, "Errors"): the same class for the same
# fault in every run.mode; these load with the first use of their name
_ERRORS = {"RewardFunctionError": "asyncrl.rewards.scorer", "EnvError": "asyncrl.agents.env",
           "WorkerError": "asyncrl.runtime.pool", "Interrupted": "asyncrl.runtime.signals",
           "RankLost": "asyncrl.distributed.world"}

__all__ = ["AsyncRLError", "CallbackError", "ConfigError", "EnvError", "Interrupted", "RankLost",
           "RewardFunctionError", "Trainer", "WorkerError", "build_config", "train"]


def __getattr__(name: str):
    if name in _ERRORS:
        return getattr(importlib.import_module(_ERRORS[name]), name)
    raise AttributeError(f"module 'asyncrl.api' has no attribute {name!r}")

INPUTS_DIR = ".inputs"  # under run.out_dir: what in-memory inputs become, for every process


class Trainer:
    """A run, configured now and trained by :meth:`train`: ``GRPOTrainer``'s shape. Arguments as
    :func:`build_config`'s, plus ``peft_config`` (a ``peft.LoraConfig``) and ``callbacks`` (objects
    with ``on_step_end`` / ``on_evaluate`` / ``on_save``, each given the metrics row:
    asyncrl.runtime.callbacks). Bad input raises :class:`~asyncrl.config.ConfigError` here, one
    line naming the argument or key, before anything starts; ``config`` is the resolved Config."""

    def __init__(self, config: Any = None, *, reward_funcs: Sequence[Callable | str] | None = None,
                 train_dataset: Any = None, eval_dataset: Any = None,
                 environment_factory: Callable | str | None = None, tools: Sequence[Callable | str] | None = None,
                 harness: Callable | str | None = None, peft_config: Any = None,
                 callbacks: Sequence[Any] | None = None, overrides: Mapping[str, Any] | None = None, **keys: Any):
        from asyncrl.runtime.callbacks import checked_callbacks

        self.callbacks = checked_callbacks(callbacks)
        overrides = {**(overrides or {}), **_lora_overrides(peft_config, overrides, keys)}
        self.config = build_config(config, reward_funcs=reward_funcs, train_dataset=train_dataset,
                                   eval_dataset=eval_dataset, environment_factory=environment_factory, tools=tools,
                                   harness=harness, overrides=overrides, **keys)

    def add_callback(self, callback: Any) -> None:
        """One more callback (an object, or a class to instantiate), checked as the others."""
        from asyncrl.runtime.callbacks import checked_callbacks

        self.callbacks += checked_callbacks([callback])

    def train(self) -> dict | None:
        """Train and return the run's summary (what ``summary.json`` holds); None on a ``torchrun``
        rank other than 0, which follows rank 0's loop (and calls no callback). A callback that
        raises stops the run: :class:`~asyncrl.runtime.callbacks.CallbackError`."""
        from transformers.utils import logging as hf_logging

        from asyncrl.runtime import train as run_training

        hf_logging.disable_progress_bar()  # the run's own progress line is the only one (as in the CLI)
        return run_training(self.config, callbacks=self.callbacks)


def train(config: Any = None, *, reward_funcs: Sequence[Callable | str] | None = None,
          train_dataset: Any = None, eval_dataset: Any = None, environment_factory: Callable | str | None = None,
          tools: Sequence[Callable | str] | None = None, harness: Callable | str | None = None,
          peft_config: Any = None, callbacks: Sequence[Any] | None = None,
          overrides: Mapping[str, Any] | None = None, **keys: Any) -> dict | None:
    """``Trainer(...).train()`` in one call: the run's summary (what ``summary.json`` holds). Bad
    input raises :class:`~asyncrl.config.ConfigError` (one line naming the key) before anything starts."""
    return Trainer(config, reward_funcs=reward_funcs, train_dataset=train_dataset, eval_dataset=eval_dataset,
                   environment_factory=environment_factory, tools=tools, harness=harness,
                   peft_config=peft_config, callbacks=callbacks, overrides=overrides, **keys).train()


def _lora_overrides(peft_config: Any, overrides: Mapping[str, Any] | None, keys: Mapping[str, Any]) -> dict:
    """``policy.lora_*`` of ``peft_config`` (none without one); ConfigError when ``overrides`` or a
    keyword argument sets one of them too: LoRA is given in one place."""
    if peft_config is None:
        return {}
    from asyncrl.config import ConfigError
    from asyncrl.policy.lora import lora_settings

    settings = lora_settings(peft_config)
    given = set(overrides or {}) | {key.replace("__", ".") for key in keys}
    clash = sorted(given & set(settings))
    if clash:
        raise ConfigError("peft_config", f"{clash[0]} is set too; give the LoRA settings in one place")
    return settings


def build_config(config: Any = None, *, reward_funcs: Sequence[Callable | str] | None = None,
                 train_dataset: Any = None, eval_dataset: Any = None,
                 environment_factory: Callable | str | None = None, tools: Sequence[Callable | str] | None = None,
                 harness: Callable | str | None = None, overrides: Mapping[str, Any] | None = None, **keys: Any):
    """The :class:`~asyncrl.config.Config` that :func:`train` runs (arguments as there), built by
    :func:`asyncrl.runtime.validate.load_run_config` like every other config; writes the in-memory inputs under
    ``<run.out_dir>/.inputs/`` first, so the config names files every process can read."""
    from asyncrl.runtime.validate import load_run_config

    settings = {**(overrides or {}), **{key.replace("__", "."): value for key, value in keys.items()}}
    # where the inputs go: the run's out_dir (task and reward may name files not written yet)
    out_dir = load_run_config(config, settings=settings, ignore=("task", "reward")).run.out_dir
    inputs = Path(out_dir) / INPUTS_DIR
    for key, dataset in (("task.path", train_dataset), ("task.eval_path", eval_dataset)):
        if dataset is not None:
            settings[key] = dataset_path(dataset, inputs, "train_dataset" if key == "task.path" else "eval_dataset")
    if reward_funcs is not None:
        if isinstance(reward_funcs, (str, bytes)) or callable(reward_funcs):
            reward_funcs = [reward_funcs]
        settings.update(reward_settings(reward_funcs, inputs, settings))
    if tools is not None:
        if isinstance(tools, (str, bytes)) or callable(tools):
            tools = [tools]
        settings["env.tools"] = [tool_path(fn, inputs, f"tools[{i}]") for i, fn in enumerate(tools)]
    if environment_factory is not None:
        # a class with get_reward gets its reward function in reward.funcs when the config is validated
        # (asyncrl.runtime.validate.add_factory_reward)
        settings["env.factory"] = factory_path(environment_factory, inputs, settings.get("env.kwargs"))
    if harness is not None:
        settings["env.harness"] = harness if isinstance(harness, str) else harness_path(harness, inputs)
    return load_run_config(config, settings=settings)


# -- in-memory inputs → files every process can read -----------------------------------------------


def _store(inputs: Path, stem: str, suffix: str, write: Callable[[Path], None]) -> str:
    """Write with ``write`` to a temporary file, then keep it as ``<stem>-<content hash><suffix>``."""
    inputs.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=inputs, prefix=f".{stem}-", suffix=suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        digest = hashlib.sha1(Path(tmp).read_bytes()).hexdigest()[:16]
        final = inputs / f"{stem}-{digest}{suffix}"
        os.replace(tmp, final)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return str(final.absolute())


def dataset_path(dataset: Any, inputs: Path, name: str) -> str:
    """A path for ``dataset``: itself when it is one; else the file it is written to."""
    from asyncrl.config import ConfigError

    if isinstance(dataset, (str, os.PathLike)):
        return str(dataset)
    kind = type(dataset).__module__.split(".")[0]
    if kind == "datasets" and hasattr(dataset, "to_parquet") and hasattr(dataset, "column_names"):
        return _store(inputs, name, ".parquet", lambda p: _to_parquet(dataset, p))
    if kind == "datasets":
        raise ConfigError(name, f"a {type(dataset).__name__} has several splits; pass one: {name}=ds['train']")
    if isinstance(dataset, Sequence) and dataset and all(isinstance(row, Mapping) for row in dataset):
        def write(path: Path) -> None:
            try:
                path.write_text("".join(json.dumps(dict(row)) + "\n" for row in dataset), encoding="utf-8")
            except (TypeError, ValueError) as err:
                raise ConfigError(name, f"a row cannot be written as JSON: {err}") from None
        return _store(inputs, name, ".jsonl", write)
    raise ConfigError(name, f"expected a datasets.Dataset, a non-empty list of dicts or a path, got "
                            f"{type(dataset).__name__}")


def _to_parquet(dataset: Any, path: Path) -> None:
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        dataset.to_parquet(str(path))
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _importable(fn: Callable) -> str | None:
    """``module:qualname`` when importing that gives back ``fn`` itself, else None."""
    module, qualname = getattr(fn, "__module__", None), getattr(fn, "__qualname__", None)
    if not module or module == "__main__" or not qualname or "<" in qualname:
        return None
    try:
        target = resolve(f"{module}:{qualname}")
    except ValueError:  # a module that does not import again cleanly: pickle by value instead
        return None
    return f"{module}:{qualname}" if target is fn else None


def reward_settings(reward_funcs: Sequence[Any], inputs: Path, settings: Mapping[str, Any]) -> dict:
    """``reward.funcs`` and ``reward.models`` for TRL's ``reward_funcs`` list: its reward models
    (:func:`reward_model_path`) go to ``reward.models``, the rest to ``reward.funcs``. ``reward.weights``
    in ``settings`` (given with the list, one per entry in its order, as TRL's ``reward_weights``)
    are reordered to the config's: functions, then models."""
    from asyncrl.config import ConfigError

    funcs, models, is_model = [], [], []
    for i, entry in enumerate(reward_funcs):
        model = reward_model_path(entry, inputs, f"reward_funcs[{i}]")
        if model is None:
            funcs.append(reward_path(entry, inputs, f"reward_funcs[{i}]"))
        else:
            models.append(model)
        is_model.append(model is not None)
    out: dict[str, Any] = {"reward.funcs": funcs}
    if not models:
        return out
    if "reward.models" in settings:
        raise ConfigError("reward_funcs", "names reward models and reward.models is set too; give them in one place")
    out["reward.models"] = models
    weights = settings.get("reward.weights")
    if isinstance(weights, Sequence) and len(weights) == len(is_model):
        out["reward.weights"] = [w for w, m in zip(weights, is_model) if not m] + \
            [w for w, m in zip(weights, is_model) if m]
    return out


def reward_model_path(entry: Any, inputs: Path, key: str) -> str | None:
    """``reward.models`` entry for a reward model in ``reward_funcs``, None for anything else: a
    string naming an existing directory as itself; a ``PreTrainedModel`` (its tokenizer loaded from
    where it was loaded from, as TRL does) or a ``(model, tokenizer)`` pair saved once under
    ``.inputs/`` (asyncrl.rewards.reward_model.save_reward_model), so rollout workers load it."""
    from asyncrl.config import ConfigError

    if isinstance(entry, str):
        if os.path.isdir(os.path.expanduser(entry)):
            return entry
        if ":" not in entry:
            raise ConfigError(key, f"{entry!r} is neither a local reward model directory (no such directory; a "
                                   "hub model is downloaded first: hf download ORG/NAME --local-dir DIR) nor "
                                   "'module:function'")
        return None
    transformers = sys.modules.get("transformers")  # not imported: nothing here is one of its models
    pair = isinstance(entry, tuple) and len(entry) == 2
    model, tokenizer = entry if pair else (entry, None)
    if transformers is None or not isinstance(model, transformers.PreTrainedModel):
        return None
    from asyncrl.rewards.reward_model import save_reward_model, tokenizer_of

    try:
        return save_reward_model(model, tokenizer if tokenizer is not None else tokenizer_of(model), inputs)
    except ValueError as err:
        raise ConfigError(key, str(err)) from None


def reward_path(fn: Callable | str, inputs: Path, key: str) -> str:
    """``reward.funcs`` entry for ``fn``: a string as given, an importable function's reference,
    else the path of its cloudpickle (``.inputs/reward-<hash>.pkl:<name>``)."""
    from asyncrl.config import ConfigError

    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise ConfigError(key, f"expected a function, 'module:function' or a reward model (a directory, a "
                               f"PreTrainedModel), got {type(fn).__name__}")
    return _travelling(fn, inputs, key, "reward", "my_rewards", "fn")


def tool_path(fn: Callable | str, inputs: Path, key: str) -> str:
    """``env.tools`` entry for ``fn`` (TRL's ``tools=[fn]``): a string as given (a built-in tool or
    an import path), else a function checked to be a tool now, named as :func:`reward_path` names one."""
    from asyncrl.agents.tools import Tool
    from asyncrl.config import ConfigError

    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise ConfigError(key, f"expected a function or 'module:function', got {type(fn).__name__}")
    try:
        Tool.from_function(fn)  # a lambda, or a function without hints or docstring: refused by name
    except ValueError as err:
        raise ConfigError(key, str(err)) from None
    return _travelling(fn, inputs, key, "tool", "my_tools", "fn")


def factory_path(factory: Callable | str, inputs: Path, kwargs: Mapping | None = None) -> str:
    """``env.factory`` entry for TRL's ``environment_factory``: a string as given, else the class (or
    zero-argument factory), either checked now and named as :func:`reward_path` names a function."""
    from asyncrl.config import ConfigError
    from asyncrl.envs.trl import inspect_factory, load_factory

    key = "environment_factory"
    if isinstance(factory, Mapping):
        raise ConfigError(key, "a dict of environments (TRL's multi-environment form) is not supported; pass one "
                               "class, which may route rows itself by a column its reset reads")
    try:
        if isinstance(factory, str):
            load_factory(factory, dict(kwargs or {}))
            return factory
        shown = getattr(factory, "__qualname__", None) or type(factory).__name__
        inspect_factory(factory, shown, dict(kwargs or {}))
    except ValueError as err:
        raise ConfigError(key, str(err)) from None
    return _travelling(factory, inputs, key, "env", "my_envs", "MyEnv")


def harness_path(harness: Callable, inputs: Path) -> str:
    """``env.harness`` entry for a harness function: its import path, or its pickle's."""
    from asyncrl.config import ConfigError

    if not callable(harness):
        raise ConfigError("harness", f"expected a function agent(session) or 'module:function', got "
                                     f"{type(harness).__name__}")
    return _travelling(harness, inputs, "harness", "harness", "my_agent", "agent")


def _travelling(obj: Callable, inputs: Path, key: str, stem: str, module: str, attr: str) -> str:
    """``obj``'s import path when importing it gives it back, else the path of its cloudpickle
    (``.inputs/<stem>-<hash>.pkl:<name>``); ConfigError ``key`` naming it when it cannot travel to
    a rollout worker process. ``module``/``attr``: the example of the hint."""
    from asyncrl.config import ConfigError

    reference = _importable(obj)
    if reference is not None:
        return reference
    shown = getattr(obj, "__qualname__", None) or type(obj).__name__
    name = re.sub(r"\W+", "_", getattr(obj, "__name__", "") or type(obj).__name__).strip("_") or stem
    try:
        import cloudpickle
    except ImportError:
        raise ConfigError(key, f"{shown} (in {getattr(obj, '__module__', '?')}) cannot reach the rollout worker "
                               f"processes by an import path, and cloudpickle is not installed to send it: define it "
                               f"in a module ({module}.py, passed as '{module}:{attr}') or pip install cloudpickle"
                          ) from None
    try:
        blob = cloudpickle.dumps(obj)
        pickle.loads(blob)
    except Exception as err:  # what a closure or a class holds (a lock, a socket, a model) may not pickle
        raise ConfigError(key, f"{shown} cannot be sent to the rollout worker processes ({first_line(err)}); "
                               f"define it in a module (passed as '{module}:{attr}') without "
                               "unpicklable state") from None
    return _store(inputs, stem, ".pkl", lambda p: p.write_bytes(blob)) + f":{name}"
