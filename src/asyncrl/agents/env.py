"""The environment seam: what an environment is (:class:`Environment`), and the checked calls the
runtime makes to it.

An environment is any object with

    reset(row: dict) -> str | list[dict]                    the first prompt (text or messages)
    step(action: str) -> (observation, reward, done, info)  its answer to one assistant turn

plain or ``async def``. ``observation``: text (one message of the environment's ``role``, default
"user") or a list of ``{"role", "content"}`` messages; ``reward``: a finite number (per-turn
reward, combined with ``env.turn_discount``); ``done``: bool; ``info``: a dict reward functions
receive. Optional attributes: ``stop`` (strings that end an assistant turn), ``role``, and
``instance``: what reward functions receive for the episode in ``environments`` (default: the
environment itself). An environment whose tools act on its own state (the TRL adapter's,
asyncrl.envs.trl) also has ``tool_functions()``: {tool name: the callable that runs that tool's
calls in this episode} (:func:`tool_functions`). Its episode runs a turn's tool calls one after
another, in the order written (they share the state), and none on the turn that reaches
``env.max_turns``, so that the state the reward reads is the one whose results the model saw.

Every call is bounded (``env.step_timeout_s``) and checked. The episode scheduler
(:mod:`asyncrl.agents.calls`) runs the calls of many episodes at once and tells two kinds of
failure apart: a call that raises or times out is a *run-time* failure (retried, then the episode
fails and its group is dropped: remote environments time out now and then); a call that returns
the wrong thing is a *broken contract*, which stops the run at first sight with one line naming
the environment and the row (:class:`EnvError`, exit 2), never a traceback. Bad input from the
model is the environment's business (an error observation); bad output from the environment is a
bug to fix, not a score to guess.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from asyncrl.core.loader import ConfigError
from asyncrl.core.user_code import Exited, TimedOut, call_guarded, finite_number, first_line
from asyncrl.tasks import Problem
from asyncrl.tasks.chat import ROLES, as_dicts

__all__ = ["EnvError", "Environment", "StepResult", "build_env", "check_messages", "check_reset", "check_step",
           "env_reset", "env_step", "row_of", "tool_functions"]


Prompt = str | list[dict]  # text, or {"role", "content"} messages
Observation = str | list[dict]
StepOutcome = tuple[Observation, float, bool, dict]  # (observation, reward, done, info)


@runtime_checkable
class Environment(Protocol):
    """One episode's environment, built by its factory (``env.name``'s entry of
    :data:`asyncrl.agents.ENVIRONMENTS`, called with ``env.kwargs``) for each episode. Either method
    may be ``async def``. The optional attributes (``stop``, ``role``, ``instance``,
    ``tool_functions()``) are read with ``getattr``; see the module's notes."""

    def reset(self, row: dict) -> Prompt | Awaitable[Prompt]:
        """The episode's first prompt for ``row`` (:func:`row_of`: the row's columns, uid, prompt,
        answer)."""
        ...

    def step(self, action: str) -> StepOutcome | Awaitable[StepOutcome]:
        """The environment's answer to one assistant turn ``action``: (observation, reward, done,
        info)."""
        ...


class EnvError(ConfigError):
    """An environment failed or broke its contract: one line naming it and the row (exit 2)."""

    def __init__(self, env: Any, problem: Problem | None, message: str):
        where = f" on row uid={problem.uid}" if problem is not None else ""
        ValueError.__init__(self, f"environment {_name(env)}{where}: {message}")
        self.key = "env.name"


def _name(env: Any) -> str:
    cls = env if isinstance(env, type) else type(env)
    return f"{cls.__module__}.{cls.__qualname__}"


def build_env(factory: Callable[..., Environment], kwargs: dict) -> Environment:
    """One environment instance (``factory(**env.kwargs)``); EnvError when the constructor fails."""
    try:
        return factory(**kwargs)
    except Exception as err:  # a user's constructor may raise anything
        raise EnvError(factory, None, f"construction with env.kwargs={kwargs} raised {first_line(err)}") from None


def tool_functions(env: Environment) -> Mapping[str, Callable] | None:
    """The environment's own functions for the tools that act on its state (its optional
    ``tool_functions()``), or None: its episode's tools are plain functions."""
    own = getattr(env, "tool_functions", None)
    return None if own is None else own()


def row_of(problem: Problem) -> dict:
    """What ``reset`` receives: the row's own columns, then uid, prompt (text or messages), answer."""
    row = dict(problem.fields or {})
    row.update(uid=problem.uid, prompt=as_dicts(problem.messages) if problem.messages else problem.prompt,
               answer=problem.answer)
    return row


def _call(env: Any, problem: Problem, what: str, fn: Callable, timeout_s: float | None, *args) -> Any:
    def run():
        out = fn(*args)
        return asyncio.run(out) if inspect.iscoroutine(out) else out

    try:
        return call_guarded(run, timeout_s)
    except TimedOut:
        raise EnvError(env, problem, f"{what} took longer than env.step_timeout_s={timeout_s:g} s") from None
    except Exited as err:
        raise EnvError(env, problem, f"{what} {err}") from None
    except Exception as err:  # the environment's own bug
        raise EnvError(env, problem, f"{what} raised {first_line(err)}") from None


def check_messages(env: Any, problem: Problem, value: Any, what: str, role: str) -> list[dict]:
    """``value`` (text, or a list of {role, content} messages) as messages; EnvError otherwise."""
    if isinstance(value, str):
        return [{"role": role, "content": value}]
    if isinstance(value, (list, tuple)) and value and all(isinstance(m, dict) for m in value):
        for m in value:
            if m.get("role") not in ROLES or not isinstance(m.get("content"), str):
                raise EnvError(env, problem, f"{what} has a message {str(m)[:80]}; each needs a role of "
                                             f"{', '.join(ROLES)} and a string content")
        return [{"role": m["role"], "content": m["content"]} for m in value]
    raise EnvError(env, problem, f"{what} is {type(value).__name__} {repr(value)[:60]}; expected a string or a "
                                 "non-empty list of {role, content} messages")


def env_reset(env: Environment, problem: Problem, timeout_s: float | None) -> list[dict]:
    """The episode's first prompt as messages (one guarded call, in this thread)."""
    return check_reset(env, problem, _call(env, problem, "reset", env.reset, timeout_s, row_of(problem)))


def check_reset(env: Any, problem: Problem, out: Any) -> list[dict]:
    """What ``reset`` returned, as the episode's first messages; EnvError for a broken contract."""
    return check_messages(env, problem, out, "reset's prompt", "user")


class StepResult:
    """A checked ``step``: observation messages (empty when done), reward, done, info."""

    __slots__ = ("done", "info", "messages", "reward")

    def __init__(self, messages: list[dict], reward: float, done: bool, info: dict):
        self.messages, self.reward, self.done, self.info = messages, reward, done, info


def env_step(env: Environment, problem: Problem, action: str, timeout_s: float | None) -> StepResult:
    """One guarded ``step``, in this thread, checked."""
    return check_step(env, problem, _call(env, problem, "step", env.step, timeout_s, action))


def check_step(env: Any, problem: Problem, out: Any) -> StepResult:
    """What ``step`` returned, checked; EnvError for a broken contract."""
    if not isinstance(out, tuple) or len(out) != 4:
        raise EnvError(env, problem, f"step returned {type(out).__name__}; expected a tuple "
                                     "(observation, reward, done, info)")
    observation, reward, done, info = out
    reward = finite_number(reward)
    if reward is None:
        raise EnvError(env, problem, f"step returned reward {out[1]!r}; rewards must be finite numbers")
    if not isinstance(info, dict):
        raise EnvError(env, problem, f"step returned info of type {type(info).__name__}; expected a dict")
    done = bool(done)
    role = getattr(env, "role", "user")
    messages = [] if done and not observation else check_messages(env, problem, observation, "step's observation", role)
    return StepResult(messages, reward, done, info)
