"""``asyncrl.train(...)``: training from Python, the way a TRL user calls ``GRPOTrainer``.

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
  in every process. One that cannot travel is refused here, in one line (a ConfigError).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import pickle
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["build_config", "train"]

INPUTS_DIR = ".inputs"  # under run.out_dir: what in-memory inputs become, for every process


def train(config: Any = None, *, reward_funcs: Sequence[Callable | str] | None = None,
          train_dataset: Any = None, eval_dataset: Any = None, overrides: Mapping[str, Any] | None = None,
          **keys: Any) -> dict:
    """Train and return the run's summary (what ``summary.json`` holds). Bad input raises
    :class:`~asyncrl.config.ConfigError` (one line naming the key) before anything starts."""
    cfg = build_config(config, reward_funcs=reward_funcs, train_dataset=train_dataset,
                       eval_dataset=eval_dataset, overrides=overrides, **keys)
    from transformers.utils import logging as hf_logging

    from asyncrl.runtime import train as run_training

    hf_logging.disable_progress_bar()  # the run's own progress line is the only one (as in the CLI)
    return run_training(cfg)


def build_config(config: Any = None, *, reward_funcs: Sequence[Callable | str] | None = None,
                 train_dataset: Any = None, eval_dataset: Any = None,
                 overrides: Mapping[str, Any] | None = None, **keys: Any):
    """The :class:`~asyncrl.config.Config` that :func:`train` runs (arguments as there), built by
    :func:`asyncrl.config.load_config` like every other config; writes the in-memory inputs under
    ``<run.out_dir>/.inputs/`` first, so the config names files every process can read."""
    from asyncrl.config import load_config

    settings = {**(overrides or {}), **{key.replace("__", "."): value for key, value in keys.items()}}
    # where the inputs go: the run's out_dir (task and reward may name files not written yet)
    out_dir = load_config(config, settings=settings, ignore=("task", "reward")).run.out_dir
    inputs = Path(out_dir) / INPUTS_DIR
    for key, dataset in (("task.path", train_dataset), ("task.eval_path", eval_dataset)):
        if dataset is not None:
            settings[key] = dataset_path(dataset, inputs, "train_dataset" if key == "task.path" else "eval_dataset")
    if reward_funcs is not None:
        if isinstance(reward_funcs, (str, bytes)) or callable(reward_funcs):
            reward_funcs = [reward_funcs]
        settings["reward.funcs"] = [reward_path(fn, inputs, f"reward_funcs[{i}]") for i, fn in enumerate(reward_funcs)]
    return load_config(config, settings=settings)


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
        target: Any = importlib.import_module(module)
        for part in qualname.split("."):
            target = getattr(target, part)
    except Exception:  # a module that does not import again cleanly: pickle by value instead
        return None
    return f"{module}:{qualname}" if target is fn else None


def reward_path(fn: Callable | str, inputs: Path, key: str) -> str:
    """``reward.funcs`` entry for ``fn``: a string as given, an importable function's reference,
    else the path of its cloudpickle (``.inputs/reward-<hash>.pkl:<name>``)."""
    from asyncrl.config import ConfigError

    if isinstance(fn, str):
        return fn
    if not callable(fn):
        raise ConfigError(key, f"expected a function or 'module:function', got {type(fn).__name__}")
    reference = _importable(fn)
    if reference is not None:
        return reference
    shown = getattr(fn, "__qualname__", None) or type(fn).__name__
    name = re.sub(r"\W+", "_", getattr(fn, "__name__", "") or type(fn).__name__).strip("_") or "reward"
    try:
        import cloudpickle
    except ImportError:
        raise ConfigError(key, f"{shown} (in {getattr(fn, '__module__', '?')}) cannot reach the rollout worker "
                               "processes by an import path, and cloudpickle is not installed to send it: define it "
                               "in a module (my_rewards.py, passed as 'my_rewards:fn') or pip install cloudpickle"
                          ) from None
    try:
        blob = cloudpickle.dumps(fn)
        pickle.loads(blob)
    except Exception as err:  # what a closure holds (a lock, a socket, a model) may not pickle
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        raise ConfigError(key, f"{shown} cannot be sent to the rollout worker processes ({type(err).__name__}: "
                               f"{reason}); define it in a module (passed as 'my_rewards:fn') without "
                               "unpicklable state") from None
    return _store(inputs, "reward", ".pkl", lambda p: p.write_bytes(blob)) + f":{name}"
