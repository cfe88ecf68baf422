"""Seed rows for GEM's games (``task=gem``, with ``env.name=gem:<GEM id>``, asyncrl.agents.gem).

A GEM game makes its own problem: reset with a seed, it draws the secret number, the board, the
puzzle, and its first observation is the prompt. So a row here is only a seed (its ``seed``
column), the same for every member of its group; train and eval seeds never meet (train 0, 1, ...;
eval from :data:`EVAL_SEED0`). The row's own prompt is a placeholder that the environment's first
observation replaces; it is what the embedded tiny model's warm start reads, which learns nothing
about the game from it (no game has a worked solution here: train a real model,
``policy.model_path``). The score is the game's: GEM's per-turn rewards reach the episode's reward
through the environment (discounted by ``env.turn_discount``), and the task's own reward adds 0.
"""

from __future__ import annotations

from asyncrl.tasks.base import Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["EVAL_SEED0", "GemTask"]

N_TRAIN, N_EVAL = 2000, 200
EVAL_SEED0 = 1_000_000  # eval seeds start here, far past any train seed
PLACEHOLDER = "Play the game."  # replaced by the game's first observation (the environment's reset)


class GemTask:
    name = "gem"

    def __init__(self, cfg=None):
        del cfg  # no settings of its own: the game and its settings are env.name and env.kwargs
        messages = (("user", PLACEHOLDER),)
        self._splits = {
            split: tuple(Problem(uid=f"gem-{split}-{i}", prompt=render_plain(messages), answer="", solution="",
                                 fields={"seed": first + i}, messages=messages) for i in range(count))
            for split, first, count in (("train", 0, N_TRAIN), ("eval", EVAL_SEED0, N_EVAL))}

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"gem: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """0: the game scores the episode with its per-turn rewards (asyncrl.agents.gem)."""
        del completion, problem
        return 0.0
