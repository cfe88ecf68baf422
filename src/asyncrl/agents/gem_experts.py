"""Scripted players of GEM's games, whose games become the ``gem`` task's demonstrations.

The embedded tiny model's warm start learns a game only from demonstrated episodes
(asyncrl.tasks.gem). An expert here plays a game from its observations alone, as the model has to:
``act(observation) -> action text``, called with the first observation, then with each answer of
the game. The demonstrated game is played by stepping a real :class:`~asyncrl.envs.gem.GemEnv`
(:func:`play`), so its texts are the game's own.

The experts are imperfect on purpose: a warm start that already plays the best policy leaves
reinforcement learning nothing to find. A game family gets demonstrations by one entry in
:data:`EXPERTS` (``game:<Family>-v0-<mode>`` ids).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from typing import Protocol

from asyncrl.envs.gem import GemEnv

__all__ = ["BISECT_PROB", "EXPERTS", "Expert", "GuessTheNumberExpert", "expert_for", "family_of", "play"]

BISECT_PROB = 0.7  # GuessTheNumber: the midpoint this often, else a uniform draw in the range still possible


class Expert(Protocol):
    def act(self, observation: str) -> str:
        """The action text answering ``observation`` (the game's first observation, then each answer)."""
        ...


_RANGE = re.compile(r"between (\d+) and (\d+) \(inclusive\)")
_HINT = re.compile(r"you guessed (\d+), and the target number is (higher|lower) than")


class GuessTheNumberExpert:
    """A noisy binary search: the range comes from the game's instructions ("between 1 and 10
    (inclusive)") and shrinks with each hint ("... the target number is higher than 5"); each guess
    is the midpoint with probability ``bisect_prob``, else a uniform draw in the range still possible
    (never a number already ruled out, so every guess is a valid one)."""

    def __init__(self, rng: random.Random, bisect_prob: float = BISECT_PROB):
        self.rng, self.bisect_prob = rng, bisect_prob
        self.low = self.high = 0

    def act(self, observation: str) -> str:
        bounds = _RANGE.search(observation)
        if bounds:
            self.low, self.high = int(bounds.group(1)), int(bounds.group(2))
        hint = _HINT.search(observation)
        if hint:
            guessed = int(hint.group(1))
            if hint.group(2) == "higher":
                self.low = max(self.low, guessed + 1)
            else:
                self.high = min(self.high, guessed - 1)
        self.high = max(self.high, self.low)  # a contradicting hint: keep guessing in a one-number range
        if self.rng.random() < self.bisect_prob:
            guess = (self.low + self.high) // 2
        else:
            guess = self.rng.randint(self.low, self.high)
        return f"\\boxed{{{guess}}}"


# game family (the <Family> of game:<Family>-v0-<mode>) -> an expert built with the game's own generator
EXPERTS: dict[str, Callable[[random.Random], Expert]] = {"GuessTheNumber": GuessTheNumberExpert}


def family_of(gem_id: str) -> str:
    """``game:GuessTheNumber-v0-easy`` -> ``GuessTheNumber`` (the id itself when it is not a game's)."""
    family, _, rest = gem_id.partition(":")
    return rest.split("-v", 1)[0] if family == "game" else gem_id


def expert_for(gem_id: str) -> Callable[[random.Random], Expert] | None:
    """The expert of ``gem_id``'s game family, or None when it has none."""
    return EXPERTS.get(family_of(gem_id))


def play(gem_id: str, kwargs: dict, seed: int, max_turns: int) -> tuple[str, list[tuple[str, str | None]]]:
    """(the game's first observation, [(action, the game's answer or None when the episode ends
    there)]): the expert of ``gem_id`` plays the game reset with ``seed`` for at most ``max_turns``
    turns (``env.max_turns``), as an episode would; the answer that ends it is not shown, as in an
    episode. The expert draws from its own generator, seeded from ``seed`` through a string: the
    game seeds Python's generator with ``seed`` itself, and the same stream would tell the expert
    the game's draws (the secret number)."""
    make = expert_for(gem_id)
    if make is None:
        raise ValueError(f"gem:{gem_id} has no scripted expert (games with one: {', '.join(EXPERTS)})")
    expert, env = make(random.Random(f"expert-{seed}")), GemEnv(gem_id, **kwargs)
    observation = first = env.reset({"seed": seed})
    turns: list[tuple[str, str | None]] = []
    for turn in range(1, max_turns + 1):
        action = expert.act(observation)
        observation, _, done, _ = env.step(action)
        ends = done or turn == max_turns
        turns.append((action, None if ends else observation))
        if ends:
            break
    return first, turns
