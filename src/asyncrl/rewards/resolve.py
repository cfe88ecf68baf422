"""Reward functions by import path (``reward.funcs``): how each is called, checked once.

A path is resolved by :func:`asyncrl.core.import_path.resolve` (``"pkg.module:fn"``,
``"path/to/file.py:fn"``, or a function :func:`asyncrl.train` pickled into ``.inputs/``), the same
way in every process: what the trainer scores with and what a worker scores with come from the same
source. :func:`paths_only` keeps a config that is only printed from importing any of them.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from asyncrl.core.import_path import resolve

__all__ = ["CONTEXT", "RewardFunction", "imports_allowed", "load_function", "paths_only"]

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
    fn = resolve(path, need_callable=True)
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
