"""Multi-turn, tool-using episodes (docs/agents.md).

A task yields rows; an environment turns a row into an episode: ``reset(row)`` gives the first
prompt, ``step(action_text)`` the environment's answer to each assistant turn. Tools (Python
callables, :mod:`asyncrl.agents.tools`) are called by the runtime when a turn contains tool calls.
The episode is one token row built from the engine's own ids (:mod:`asyncrl.agents.episode`).

:data:`ENVIRONMENTS` is the registry of ``env.name``: name → ``"module:attr"`` of a class (or
factory) called with ``env.kwargs``. A new environment is one file plus one line here, or a line in
a plugin module named in ``run.plugins``::

    from asyncrl.agents import ENVIRONMENTS
    ENVIRONMENTS["maze"] = "my_pkg.maze:MazeEnv"

A key may also be a :class:`NameFamily`: one entry for every name with a prefix (``gem:<id>``, any
offline GEM game, :mod:`asyncrl.envs.gem`). The built-in environments other than ``answer`` and
``latency`` are the integrations' (asyncrl.envs), named by import path: this package imports none of
them. :data:`FACTORY_ADAPTER` names, the same way, what makes ``env.factory`` (a TRL environment
class) an environment: the TRL integration.
"""

from __future__ import annotations

from typing import Any

from asyncrl.config.env import NO_ENV
from asyncrl.core.import_path import resolve
from asyncrl.core.loader import ConfigError

__all__ = ["ENVIRONMENTS", "FACTORY_ADAPTER", "NO_ENV", "EnvRegistry", "NameFamily", "env_names"]


class NameFamily(str):
    """A key of :data:`ENVIRONMENTS` that stands for every ``env.name`` ``<prefix><id>``.

    Its entry names an object (``"module:attr"``) with ``refusal(id) -> str | None`` (why that id
    cannot run, one line, or None) and, as its attribute ``<id>``, the environment factory of the id.

    Why a str subclass: the config checks ``env.name`` with ``name in [none, *ENVIRONMENTS]``
    (asyncrl.core.loader, ``setting(names=...)``), and a family has too many names to list (GEM
    registers 170). A family equals every name with its prefix, so that check accepts them, while
    help and the "must be one of" error show it as one name (``gem:<id>``). An id it refuses raises
    the refusal during that same check (ConfigError naming env.name): a name that cannot run stops
    the command at config load, in one line, before any warm start."""

    prefix: str

    def __new__(cls, prefix: str, shown: str = "<id>") -> NameFamily:
        key = super().__new__(cls, prefix + shown)
        key.prefix = prefix
        return key

    __hash__ = str.__hash__  # stored under its text; a member's name hashes elsewhere and reaches __missing__

    def __eq__(self, other: object) -> bool:
        if isinstance(other, NameFamily) or not isinstance(other, str) or not other.startswith(self.prefix):
            return str.__eq__(self, other)
        why = resolve(dict.__getitem__(ENVIRONMENTS, self)).refusal(other[len(self.prefix):])
        if why is not None:
            raise ConfigError("env.name", why)
        return True

    def __ne__(self, other: object) -> bool:  # str's own __ne__ would not ask __eq__
        return not self.__eq__(other)

    def __reduce__(self):  # a copy is a family too, not its text
        return NameFamily, (self.prefix, str(self)[len(self.prefix):])


class EnvRegistry(dict):
    """``env.name`` → ``"module:attr"``; a name of a :class:`NameFamily` (which the dict does not
    hold: ``in`` and ``get`` do not see it) resolves through ``registry[name]``: the family's
    object, attribute ``<id>``."""

    def __missing__(self, name: Any) -> str:
        for key, target in self.items():
            if isinstance(key, NameFamily) and isinstance(name, str) and name.startswith(key.prefix):
                return f"{target}.{name[len(key.prefix):]}"
        raise KeyError(name)


ENVIRONMENTS: dict[str, str] = EnvRegistry({
    "answer": "asyncrl.agents.envs:FinalAnswer",
    "guess": "asyncrl.envs.guess:GuessNumber",
    NameFamily("gem:"): "asyncrl.envs.gem:GAMES",  # any offline GEM game: env.name=gem:game:Sudoku-v0-easy
    "rg_retry": "asyncrl.envs.reasoning_gym:RetryEnv",  # a reasoning-gym row, retried with the scorer's feedback
    "latency": "asyncrl.agents.latency:Latency",  # another environment with a remote one's lognormal delays
})
# env.factory -> (a callable that builds one episode's environment, the class's method tools)
FACTORY_ADAPTER = "asyncrl.envs.trl:factory_environment"


def env_names() -> list[str]:
    """The names ``env.name`` accepts now (``setting(names="asyncrl.agents:env_names")`` in
    asyncrl.config.env): ``none`` and the registered environments, plugins' included."""
    return [NO_ENV, *ENVIRONMENTS]
