"""TRL's ``environment_factory`` classes as asyncrl environments (``env.factory``; docs/agents.md,
"TRL users"): the checks of a class at config load, its method tools, the environment around one
instance, and the reward function that reads ``get_reward()``. The episode engine reaches it by the
import path asyncrl.agents.FACTORY_ADAPTER (:func:`factory_environment`).

TRL's contract (``GRPOTrainer(environment_factory=Cls)``, TRL 1.16), kept here:

* ``Cls()`` is built once per episode (``env.kwargs`` as keyword arguments, none by default), so
  every member of a GRPO group has its own instance, reset with the same row.
* ``reset(**row) -> str | None``: ``row`` is the dataset row (its columns, ``prompt`` included).
  A string is appended to the prompt's last message (to the text of a plain prompt), without a
  separator, as TRL does; None leaves the prompt as it is.
* Every public method (a function of the class whose name does not start with ``_``), except
  ``reset`` and ``get_reward``, is a tool: its schema comes from its type hints and Google-style
  docstring, and a call runs on that episode's instance (:func:`method_tool`; the environment's
  ``tool_functions``, asyncrl.agents.env: a turn's calls run one after another).
* ``get_reward() -> float`` (optional) is a reward source of weight 1, called once per finished
  episode: the reward function :func:`get_reward` (``reward.funcs``; ``asyncrl.train`` adds it, as
  TRL does), named by its documented path :data:`GET_REWARD`, which run configs hold.
* The episode ends at the first assistant turn that calls no tool (TRL's tool loop); the runtime
  also ends it at ``env.max_turns`` assistant turns (TRL's ``max_tool_calling_iterations`` + 1),
  and runs no tool on that turn, as TRL runs none after its last iteration: ``get_reward`` sees the
  state the last answered call left, not one the model never saw the result of.

A class that breaks the contract is refused at config load in one line (:func:`load_factory`).
"""

from __future__ import annotations

import asyncio
import inspect
import types
from collections.abc import Callable
from typing import Any

from asyncrl.agents.env import build_env
from asyncrl.agents.tools import Tool
from asyncrl.core.import_path import FILE_MODULE_PREFIX
from asyncrl.core.user_code import first_line

__all__ = ["GET_REWARD", "RESERVED", "TrlEnvironment", "environment_class", "factory_environment", "get_reward",
           "inspect_factory", "load_factory", "method_tool", "method_tools", "tool_names", "wrap"]

RESERVED = ("reset", "get_reward")  # TRL's names that are never tools
# the reward function that reads get_reward(), by its documented path (docs/agents.md)
GET_REWARD = "asyncrl.envs.trl:get_reward"


def tool_names(cls: type) -> list[str]:
    """The methods of ``cls`` that are tools, TRL's rule: functions of the class (inherited too;
    not properties, classmethods or attributes), public, not ``reset`` or ``get_reward``."""
    return [name for name, _ in inspect.getmembers(cls, predicate=inspect.isfunction)
            if not name.startswith("_") and name not in RESERVED]


def environment_class(factory: Callable, shown: str, kwargs: dict | None = None) -> type:
    """The class ``factory`` builds: itself when it is a class; else the type of one instance it
    returns (TRL probes one the same way). ValueError, one line, for one that cannot be used."""
    if isinstance(factory, type):
        return factory
    if not callable(factory):
        raise ValueError(f"{shown} is a {type(factory).__name__}, not a class or a factory that returns one")
    try:
        return type(factory(**(kwargs or {})))
    except Exception as err:  # a user's factory may raise anything
        raise ValueError(f"{shown}() raised {first_line(err)}") from None


def _positional(fn) -> list[inspect.Parameter] | None:
    """The positional parameters of a class's function after ``self``; None for what has no
    signature or takes ``**kwargs`` (TRL's ``reset(self, **row)``)."""
    try:
        params = list(inspect.signature(fn).parameters.values())[1:]
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _is_reset_step(cls: type) -> bool:
    """asyncrl's own environment seam: ``reset(row)`` and an untyped ``step(action)``, one argument
    each (a TRL class may have a typed tool named ``step``; an untyped one could not be a tool)."""
    reset, step = inspect.getattr_static(cls, "reset", None), inspect.getattr_static(cls, "step", None)
    if not (inspect.isfunction(reset) and inspect.isfunction(step)):
        return False
    action = _positional(step) or ()
    return len(_positional(reset) or ()) == 1 and len(action) == 1 and action[0].annotation is inspect.Parameter.empty


def _check_class(cls: type, shown: str) -> None:
    if not callable(getattr(cls, "reset", None)):
        raise ValueError(f"{shown} has no reset method; an environment_factory class needs "
                         "reset(self, **row) -> str | None")
    if _is_reset_step(cls):  # its step would be offered to the model as a tool
        raise ValueError(f"{shown} looks like an asyncrl environment (reset(row), step(action) -> (observation, "
                         "reward, done, info)), not a TRL environment_factory class (reset(**row), public methods "
                         "as tools): register it in asyncrl.agents.ENVIRONMENTS and choose it with env.name "
                         "(docs/agents.md, \"Environments\")")
    if getattr(cls, "get_reward", None) is not None:
        static = inspect.getattr_static(cls, "get_reward")
        # as an instance sees it: a plain function loses its receiver
        reward = types.MethodType(static, object()) if inspect.isfunction(static) else getattr(cls, "get_reward")
        try:
            inspect.signature(reward).bind()
        except TypeError:
            raise ValueError(f"{shown}.get_reward takes arguments; it must take none (it is called once an "
                             "episode ends and returns a float)") from None
        except ValueError:  # no signature to read (a builtin): called as it is
            pass


def method_tool(cls: type, name: str, *, timeout_s: float | None = None) -> Tool:
    """The tool for method ``name`` of ``cls``, named ``name``: the schema comes from the method with
    its receiver dropped (no instance is built for it); each call runs on the episode's own instance
    (:meth:`TrlEnvironment.tool_functions`). Same requirements as :meth:`Tool.from_function`."""
    static = inspect.getattr_static(cls, name)
    fn = static.__func__ if isinstance(static, staticmethod) else getattr(cls, name)
    # bound to a stand-in: the signature loses ``self`` on every transformers version (older
    # ones do not skip an unannotated receiver themselves)
    shown = fn if isinstance(static, staticmethod) else types.MethodType(fn, object())
    tool = Tool.from_function(shown, name=name, timeout_s=timeout_s)
    tool.function = fn
    return tool


def method_tools(cls: type, shown: str) -> list[Tool]:
    """A tool per public method of ``cls``; ValueError, one line, naming a method that cannot be one."""
    tools = []
    for name in tool_names(cls):
        try:
            tools.append(method_tool(cls, name))
        except ValueError as err:
            raise ValueError(f"{shown}.{name}: public methods are tools (TRL's rule), and this one cannot be: "
                             f"{str(err).partition(': ')[2]}; rename it _{name} to keep it from the model") from None
    return tools


def load_factory(path: str, kwargs: dict | None = None) -> tuple[Callable, type, list[Tool]]:
    """``env.factory``: (the factory, the class it builds, its method tools), resolved as
    ``reward.funcs`` paths are (``pkg.module:Cls``, ``path/to/file.py:Cls``, a pickled ``.pkl:Cls``).
    ValueError, one line, naming what is wrong."""
    from asyncrl.core.import_path import resolve

    factory = resolve(path, need_callable=True)
    return (factory, *inspect_factory(factory, path, kwargs))


def inspect_factory(factory: Callable, shown: str, kwargs: dict | None = None) -> tuple[type, list[Tool]]:
    """(the class ``factory`` builds, its method tools), checked against TRL's contract; ValueError,
    one line, naming ``shown`` and what is wrong."""
    cls = environment_class(factory, shown, kwargs)
    _check_class(cls, shown)
    return cls, method_tools(cls, shown)


class TrlEnvironment:
    """An asyncrl environment around one instance of a TRL environment class (``instance``).
    Built by :func:`wrap`, whose subclass carries the user's class name into error lines."""

    factory: Callable = None  # set on each subclass by :func:`wrap`
    kwargs: dict = {}
    methods: tuple[str, ...] = ()  # the class's method tools (:func:`tool_names`)

    def __init__(self):
        self.instance = type(self).factory(**type(self).kwargs)

    def tool_functions(self) -> dict[str, Callable]:
        """The method tools' functions, bound to this episode's instance (asyncrl.agents.env)."""
        return {name: getattr(self.instance, name) for name in type(self).methods}

    def reset(self, row: dict):
        reset = self.instance.reset
        out = reset(**_reset_kwargs(reset, row))
        if inspect.isawaitable(out):  # TRL allows ``async def reset``
            out = asyncio.run(out)
        prompt = row["prompt"]
        if out is None:
            return prompt
        if not isinstance(out, str):
            raise TypeError(f"reset returned {type(out).__name__} {repr(out)[:60]}; expected a string "
                            "(appended to the prompt) or None")
        if isinstance(prompt, str):
            return prompt + out
        last = prompt[-1]
        return [*prompt[:-1], {**last, "content": last["content"] + out}]  # TRL: content + observation

    def step(self, action: str):
        """A turn that calls no tool ends the episode (TRL's tool loop ends there); its reward is
        the reward functions' (``get_reward`` among them), not the environment's."""
        return "", 0.0, True, {}


def _reset_kwargs(reset: Callable, row: dict) -> dict:
    """``row`` for ``reset(**row)``; a ``reset`` without ``**kwargs`` gets the keys it names only (TRL
    passes every column, and would raise at the first it does not take; our rows also carry uid and
    answer, which a TRL class cannot expect)."""
    try:
        params = inspect.signature(reset).parameters.values()
    except (TypeError, ValueError):
        return row
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return row
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    return {k: v for k, v in row.items() if k in named}


def wrap(factory: Callable, cls: type, shown: str, kwargs: dict | None = None) -> type[TrlEnvironment]:
    """The environment class for ``env.factory``: a :class:`TrlEnvironment` whose name is the user's
    (EnvError lines name ``type(env)``), and whose instances each build one ``cls`` by ``factory``."""
    module, qualname = cls.__module__, cls.__qualname__
    if module.startswith(FILE_MODULE_PREFIX):  # a file's module (asyncrl.core.import_path): name the file
        path, _, qualname = shown.rpartition(":")
        module = path[:-3] if path.endswith(".py") else path
    return type(cls.__name__, (TrlEnvironment,), {"factory": staticmethod(factory), "kwargs": dict(kwargs or {}),
                                                  "methods": tuple(tool_names(cls)),
                                                  "__module__": module, "__qualname__": qualname})


def factory_environment(env_cfg) -> tuple[Callable, list[Tool]]:
    """(a callable that builds one episode's environment, the class's method tools) for the run's
    ``env`` section with ``env.factory`` set: what the episode engine plays (asyncrl.agents.rollout)."""
    factory, cls, tools = load_factory(env_cfg.factory, env_cfg.kwargs)
    env_class = wrap(factory, cls, env_cfg.factory, env_cfg.kwargs)
    return (lambda: build_env(env_class, {})), tools


def get_reward(completions: list, environments: list | None = None, **kwargs: Any) -> list[float]:
    """TRL's environment-owned reward as a reward function (``reward.funcs``): each episode's
    ``get_reward()``, weight 1 unless ``reward.weights`` says otherwise. None, TRL's "no reward
    here", counts 0 (TRL sums with ``nansum``).

    ``environments`` (the episodes' instances) reaches reward functions of episode runs only: the
    start-up check, which scores gold solutions without playing, gets zeros."""
    if environments is None:
        return [0.0] * len(completions)
    values = []
    for env in environments:
        method = getattr(env, "get_reward", None)
        if method is None:
            raise TypeError(f"{type(env).__qualname__} has no get_reward method; remove {GET_REWARD} from "
                            "reward.funcs")
        value = method()
        if inspect.isawaitable(value):  # an async judge: TRL awaits it too
            value = asyncio.run(value)
        values.append(0.0 if value is None else value)
    return values
