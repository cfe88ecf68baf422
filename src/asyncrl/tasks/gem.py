"""Seed rows for GEM's games (``task=gem``, with ``env.name=gem:<GEM id>``, asyncrl.envs.gem).

A GEM game makes its own problem: reset with a seed, it draws the secret number, the board, the
puzzle, and its first observation is the prompt. So a row here is a seed (its ``seed`` column),
the same for every member of its group; train and eval seeds never meet (train 0, 1, ...; eval
from :data:`EVAL_SEED0`). The score is the game's: GEM's per-turn rewards reach the episode's
reward through the environment (discounted by ``env.turn_discount``), and the task's own reward
adds 0.

**Demonstrations.** When the run's game has a scripted expert (asyncrl.agents.gem_experts: the
GuessTheNumber games), each train row is also a demonstrated episode for the embedded tiny model's
warm start: the expert plays the row's game (a real GEM game stepped with the row's seed, the run's
``env.kwargs``, at most ``env.max_turns`` turns), the prompt is the game's first observation and
the segments are the expert's actions (trained) and the game's answers (observed), rendered as an
episode renders them (asyncrl.agents.render.PlainTurns). The config passes the game to the task at
load (``task.gem_env``, from ``env.*``: asyncrl.config). Eval rows never carry solutions. Without an
expert (or with ``task.gem_demos=false``) a row's prompt is a placeholder that the environment's
first observation replaces, and the warm start is the general one (asyncrl.training.demonstrations).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any

from asyncrl.core.loader import setting
from asyncrl.tasks.base import EOS_SEGMENT, Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["EVAL_SEED0", "GemConfig", "GemFields", "GemTask", "demonstrated_row"]

N_TRAIN, N_EVAL = 2000, 200
EVAL_SEED0 = 1_000_000  # eval seeds start here, far past any train seed
PLACEHOLDER = "Play the game."  # replaced by the game's first observation (the environment's reset)


@dataclass
class GemFields:
    """The task's settings as plain ``task.gem_*`` keys (the run config's ``task`` section inherits them)."""

    gem_demos: bool = setting(True, "task=gem: train rows demonstrate the game played by a scripted expert when "
                                    "env.name's game has one (GuessTheNumber; docs/agents.md)")
    gem_env: dict[str, Any] = setting(help="task=gem: the game the demonstrations play, {id, kwargs, max_turns}; "
                                           "filled from env.name, env.kwargs and env.max_turns at load",
                                      factory=dict)


@dataclass(frozen=True)
class GemConfig:
    """What :class:`GemTask` is built with: the game (None: no demonstrations), its settings, the turn limit."""

    game: str | None = None
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int = 4


def _segments(turns: list[tuple[str, str | None]]) -> tuple[tuple[str, bool], ...]:
    """The expert's actions (trained) and the game's answers (observed), as an episode renders them
    without a chat template: " <action>" and eos (a GEM turn has no stop string: it ends at eos),
    then "\\n<role>: <answer>\\nassistant:"; the last action's eos is the row's own."""
    segments: list[tuple[str, bool]] = []
    for action, answer in turns:
        segments.append((f" {action}", True))
        if answer is not None:
            segments.append((EOS_SEGMENT, True))
            segments.append((f"\nuser: {answer.strip()}\nassistant:", False))
    return tuple(segments)


def demonstrated_row(uid: str, seed: int, game: str, kwargs: dict, max_turns: int) -> Problem:
    """A train row whose prompt is the game's first observation and whose segments are the expert's game."""
    from asyncrl.agents.gem_experts import play

    try:
        first, turns = play(game, kwargs, seed, max_turns)
    except Exception as err:  # the game's own error on these settings (GEM raises anything)
        raise ValueError(f"gem_env: gem:{game} with env.kwargs={kwargs} did not play its seed {seed} "
                         f"({type(err).__name__}: {str(err).strip()[:160]})") from None
    messages = (("user", first),)
    segments = _segments(turns)
    solution = "".join(text for text, _ in segments if text != EOS_SEGMENT)
    return Problem(uid=uid, prompt=render_plain(messages), answer="", solution=solution,
                   fields={"seed": seed}, messages=messages, segments=segments)


@functools.lru_cache(maxsize=4)
def _demonstrated(game: str, kwargs_json: str, max_turns: int, count: int) -> tuple[Problem, ...]:
    # a run builds its task several times (config load, warm start, each worker): one play-through each
    kwargs = json.loads(kwargs_json)
    return tuple(demonstrated_row(f"gem-train-{i}", i, game, kwargs, max_turns) for i in range(count))


def _seed_rows(split: str, first: int, count: int) -> tuple[Problem, ...]:
    messages = (("user", PLACEHOLDER),)
    return tuple(Problem(uid=f"gem-{split}-{i}", prompt=render_plain(messages), answer="", solution="",
                         fields={"seed": first + i}, messages=messages) for i in range(count))


class GemTask:
    name = "gem"

    @classmethod
    def config_from(cls, keys: GemFields) -> GemConfig:
        """The task's settings out of the run config's ``task`` section (``gem_env`` filled at load)."""
        env = keys.gem_env or {}
        game = env.get("id") if keys.gem_demos else None
        return GemConfig(game=game, kwargs=dict(env.get("kwargs") or {}), max_turns=int(env.get("max_turns") or 4))

    def __init__(self, cfg: GemConfig | None = None):
        from asyncrl.agents.gem_experts import expert_for

        cfg = cfg if cfg is not None else GemConfig()
        if cfg.game is not None and expert_for(cfg.game) is not None:
            train = _demonstrated(cfg.game, json.dumps(cfg.kwargs, sort_keys=True), cfg.max_turns, N_TRAIN)
        else:
            train = _seed_rows("train", 0, N_TRAIN)
        self._splits = {"train": train, "eval": _seed_rows("eval", EVAL_SEED0, N_EVAL)}

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"gem: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """0: the game scores the episode with its per-turn rewards (asyncrl.envs.gem)."""
        del completion, problem
        return 0.0
