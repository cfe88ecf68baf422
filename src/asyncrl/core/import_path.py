"""Import paths → objects, resolved the same way in every process: the one resolver of asyncrl.

A path is ``"pkg.module:attr"`` (imported with :func:`importlib.import_module`, so the module must be
importable: installed, on ``PYTHONPATH``, or in the current directory, which every process adds to
the end of its import path) or ``"path/to/file.py:attr"`` (the file is executed once per process as
a module of its own, so a script directory works without packaging). ``attr`` may be dotted
(``Class.method``). Workers receive these strings and resolve them here themselves: what the trainer
runs and what a worker runs come from the same source. ``"path/to/fn.pkl:name"`` is a function
pickled by value (cloudpickle) by :func:`asyncrl.train` for a callable that no import path reaches
(one defined in a script).

Config keys (``reward.funcs``, ``env.tools``, ``env.harness``, ``env.factory``), registry entries
(:mod:`asyncrl.core.registries`, ``asyncrl.tasks.TASKS``, ...) and a payload's error class all go
through :func:`resolve`; each failure is one ValueError line, naming the key when one is given.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import pickle
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asyncrl.core.user_code import first_line, import_guarded

__all__ = ["FILE_MODULE_PREFIX", "PICKLED_SUFFIX", "is_file_path", "normalize_path", "resolve"]

PICKLED_SUFFIX = ".pkl"
FILE_MODULE_PREFIX = "_asyncrl_reward_"  # the module a file path is executed as: _asyncrl_reward_<stem>_<hash>

_MISSING_HINT = (" (a module must be importable, e.g. from the current directory; a script's file can be named "
                 "as path/to/file.py:fn)")
_UNPICKLED: dict[str, Callable] = {}  # one load per file per process, as for a module


def is_file_path(path: str) -> bool:
    """``"dir/x.py:fn"`` or ``"x.py:fn"`` names a file; ``"pkg.mod:fn"`` a module."""
    module = path.rpartition(":")[0]
    return module.endswith(".py") or "/" in module or "\\" in module


def normalize_path(path: str) -> str:
    """A file path made absolute (against the current directory): a worker, or a resumed run
    started elsewhere, then finds the same file. Module paths are returned unchanged."""
    if not isinstance(path, str) or path.count(":") < 1:
        raise ValueError(f"{path!r} is not 'pkg.module:function' or 'path/to/file.py:function'")
    module, _, attr = path.rpartition(":")
    if not module.strip() or not attr.strip():
        raise ValueError(f"{path!r} is not 'pkg.module:function' or 'path/to/file.py:function'")
    if is_file_path(path):
        return f"{Path(module).expanduser().absolute()}:{attr}"
    return path


def _import_file(file: str):
    path = Path(file)
    if not path.is_file():
        raise ImportError(f"no such file: {file}")
    # one module per file, named after its absolute path: executed once per process
    name = f"{FILE_MODULE_PREFIX}{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {file} as a Python module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before executing: dataclasses and pickling look the module up
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _unpickle(file: str, path: str) -> Callable:
    if file not in _UNPICKLED:
        try:
            with open(file, "rb") as fh:
                _UNPICKLED[file] = pickle.load(fh)
        except Exception as err:  # a missing file, or a function whose modules this process lacks
            raise ValueError(f"cannot load {path!r}: {first_line(err)}") from None
    return _UNPICKLED[file]


def _cwd_importable() -> None:
    """Users expect ``my_rewards:fn`` to import from where they start asyncrl, in every process
    (a console script's import path lacks it). Last, so it never shadows an installed package."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def _module(module_name: str, path: str):
    if not is_file_path(path) and module_name in sys.modules:  # imported already: nothing of it runs again
        return sys.modules[module_name]
    _cwd_importable()
    return import_guarded(lambda: _import_file(module_name) if is_file_path(path)
                          else importlib.import_module(module_name), path, _MISSING_HINT)


def _target(path: str) -> Any:
    full = normalize_path(path)
    # a file's path may hold a colon (C:\\...); a module's name never does, while an attribute may
    # (a registry's family entry: "asyncrl.envs.gem:GAMES.game:Sokoban-v0-easy")
    module_name, _, attr = full.rpartition(":") if is_file_path(full) else full.partition(":")
    if module_name.endswith(PICKLED_SUFFIX):
        return _unpickle(module_name, path)
    target = _module(module_name, path)
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"cannot import {path!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    return target


def resolve(path: str, key: str = "", *, need_callable: bool = False) -> Any:
    """The object that ``path`` names, its module imported now (once per process). ValueError with
    a one-line reason, ``key: `` first when ``key`` (the config key that holds the path) is given:
    a malformed path, a module that is missing or fails to import (or exits while imported), an
    attribute it lacks, or (``need_callable``) an object that cannot be called."""
    try:
        target = _target(path)
        if need_callable and not callable(target):
            raise ValueError(f"{path!r} is not callable (a {type(target).__name__})")
    except ValueError as err:
        if not key:
            raise
        raise ValueError(f"{key}: {err}") from None
    return target
