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

It is a :class:`~asyncrl.core.registry.Registry` with one prefix family, ``gem:`` (any offline GEM
game, :mod:`asyncrl.envs.gem`): its resolver gives the entry of ``gem:<id>``, or refuses the id in
one line when the config is checked. The built-in environments other than ``answer`` and
``latency`` are the integrations' (asyncrl.envs), named by import path: this package imports none of
them. :data:`FACTORY_ADAPTER` names, the same way, what makes ``env.factory`` (a TRL environment
class) an environment: the TRL integration.
"""

from __future__ import annotations

from asyncrl.config.env import NO_ENV
from asyncrl.core.registry import Registry

__all__ = ["ENVIRONMENTS", "FACTORY_ADAPTER", "NO_ENV"]

ENVIRONMENTS: Registry[str] = Registry("env.name", {
    "answer": "asyncrl.agents.envs:FinalAnswer",
    "guess": "asyncrl.envs.guess:GuessNumber",
    "rg_retry": "asyncrl.envs.reasoning_gym:RetryEnv",  # a reasoning-gym row, retried with the scorer's feedback
    "latency": "asyncrl.agents.latency:Latency",  # another environment with a remote one's lognormal delays
}, families={"gem:": "asyncrl.envs.gem:env_entry"})  # any offline GEM game: env.name=gem:game:Sudoku-v0-easy
# env.factory -> (a callable that builds one episode's environment, the class's method tools)
FACTORY_ADAPTER = "asyncrl.envs.trl:factory_environment"

