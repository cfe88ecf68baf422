"""Import paths → reward functions, resolved the same way in every process.

A path is ``"pkg.module:fn"`` (imported with :func:`importlib.import_module`, so the module must be
importable: installed, on ``PYTHONPATH``, or in the current directory, which every process adds to
the end of its import path) or ``"path/to/file.py:fn"`` (the file is executed once per process as a
module of its own, so a script directory works without packaging). Workers receive these strings and
resolve them here themselves: what the trainer scores with and what a worker scores with come from
the same source. ``"path/to/fn.pkl:name"`` is a function pickled by value (cloudpickle) by
:func:`asyncrl.train` for a callable that no import path reaches (one defined in a script).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import pickle
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from asyncrl.rewards.guard import import_guarded

__all__ = ["CONTEXT", "PICKLED_SUFFIX", "RewardFunction", "imports_allowed", "is_file_path", "load_function",
           "normalize_path", "paths_only", "resolve"]

# False while a config is only read, not run (`asyncrl config`): importing a user's module runs it
_IMPORTS_ALLOWED: ContextVar[bool] = ContextVar("asyncrl_reward_imports", default=True)


@contextmanager
def paths_only() -> Iterator[None]:
    """Within it, loading a config checks the form of each ``reward.funcs`` path but imports no
    module: printing a config must not run user code."""
    token = _IMPORTS_ALLOWED.set(False)
    try:
        yield
    finally:
        _IMPORTS_ALLOWED.reset(token)


def imports_allowed() -> bool:
    """Whether a config being loaded may import its reward functions (see :func:`paths_only`)."""
    return _IMPORTS_ALLOWED.get()

# keyword arguments every call can receive besides the row fields (see docs/rewards.md)
CONTEXT = ("prompts", "problems", "task")
# what an episode adds to a reward function's arguments (asyncrl.agents.rollout): none of it exists
# before an episode was played, so the start-up check cannot supply it
EPISODE_CONTEXT = ("tool_calls", "env_info", "env_reward", "turns", "environments")
# TRL passes every argument by keyword: a function whose first parameter is one of these (TRL's
# ``def reward(environments, **kwargs)``) is called by keyword, not with the completions first
KEYWORD_FIRST = ("prompts", "completion_ids", "environments", "trainer_state", "problems", "task")


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
    name = f"_asyncrl_reward_{path.stem}_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]}"
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


PICKLED_SUFFIX = ".pkl"
_UNPICKLED: dict[str, Callable] = {}  # one load per file per process, as for a module


def _unpickle(file: str, path: str) -> Callable:
    if file not in _UNPICKLED:
        try:
            with open(file, "rb") as fh:
                _UNPICKLED[file] = pickle.load(fh)
        except Exception as err:  # a missing file, or a function whose modules this process lacks
            reason = (str(err).strip().splitlines() or [""])[0][:200]
            raise ValueError(f"cannot load {path!r}: {type(err).__name__}: {reason}") from None
    return _UNPICKLED[file]


_MISSING_HINT = (" (a module must be importable, e.g. from the current directory; a script's file can be named "
                 "as path/to/file.py:fn)")


def _cwd_importable() -> None:
    """Users expect ``my_rewards:fn`` to import from where they start asyncrl, in every process
    (a console script's import path lacks it). Last, so it never shadows an installed package."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def resolve(path: str) -> Callable:
    """The callable that ``path`` names; raises ValueError with a one-line reason."""
    module_name, _, attr = normalize_path(path).rpartition(":")
    if module_name.endswith(PICKLED_SUFFIX):
        target = _unpickle(module_name, path)
        if not callable(target):
            raise ValueError(f"{path!r} is not callable (a {type(target).__name__})")
        return target
    _cwd_importable()
    module = import_guarded(lambda: _import_file(module_name) if is_file_path(path)
                            else importlib.import_module(module_name), path, _MISSING_HINT)
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"cannot import {path!r}: {module_name} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"{path!r} is not callable (a {type(target).__name__})")
    return target


@dataclass(frozen=True)
class RewardFunction:
    """A resolved reward function and how to call it.

    ``by_keyword``: every argument goes in by keyword, completions as ``completions=`` when the
    function takes them (TRL's convention: it has a parameter of that name, or its first parameter
    is another of TRL's names, like ``environments``), rather than as the first positional argument. ``accepts``: the keyword
    names it takes (None: it has ``**kwargs`` and gets every field). ``required``: those without a
    default, which every call must be able to supply."""

    path: str
    name: str
    fn: Callable
    by_keyword: bool
    accepts: frozenset[str] | None
    required: frozenset[str]
    takes_completions: bool = True  # False: TRL's ``def f(environments, **kwargs)`` without a completions name

    def __call__(self, completions: list[str], context: dict) -> object:
        kwargs = context if self.accepts is None else {k: v for k, v in context.items() if k in self.accepts}
        if self.by_keyword:
            if self.takes_completions:
                kwargs = {**kwargs, "completions": completions}
            return self.fn(**kwargs)
        return self.fn(completions, **kwargs)


def load_function(path: str) -> RewardFunction:
    """Resolve ``path`` and check that its signature can take ``fn(completions, **fields)``."""
    fn = resolve(path)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        raise ValueError(f"{path!r}: cannot read the function's signature") from None
    P = inspect.Parameter
    named = [p for p in params if p.kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY)]
    positional = [p for p in params if p.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD)]
    has_completions = any(p.name == "completions" for p in named)
    by_keyword = has_completions or bool(
        positional and positional[0].kind is P.POSITIONAL_OR_KEYWORD and positional[0].name in KEYWORD_FIRST)
    if not by_keyword and not positional and not any(p.kind is P.VAR_POSITIONAL for p in params):
        raise ValueError(f"{path!r}: takes no completions argument; the signature must be "
                         "fn(completions, *, prompts, **row_fields) -> list[float]")
    first = None if by_keyword or not positional else positional[0]
    extra_positional = [p.name for p in positional[1:] if p.kind is P.POSITIONAL_ONLY and p.default is P.empty]
    if extra_positional:
        raise ValueError(f"{path!r}: positional-only parameter(s) {', '.join(extra_positional)} cannot be "
                         "passed; only completions is positional, everything else is a keyword")
    keywords = [p for p in named if p is not first and p.name != "completions"]
    takes_completions = has_completions or any(p.kind is P.VAR_KEYWORD for p in params)
    has_var_kw = any(p.kind is P.VAR_KEYWORD for p in params)
    name = path.rpartition(":")[2].rpartition(".")[2]  # as written: lambdas and partials have no good __name__
    return RewardFunction(
        path=path, name=name, fn=fn, by_keyword=by_keyword,
        accepts=None if has_var_kw else frozenset(p.name for p in keywords),
        required=frozenset(p.name for p in keywords if p.default is P.empty), takes_completions=takes_completions)
