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
"""

from __future__ import annotations

__all__ = ["ENVIRONMENTS", "NO_ENV"]

NO_ENV = "none"  # env.name of single-turn runs: one prompt, one completion
ENVIRONMENTS: dict[str, str] = {
    "answer": "asyncrl.agents.envs:FinalAnswer",
    "guess": "asyncrl.agents.guess:GuessNumber",
}
