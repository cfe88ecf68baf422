"""Guess-the-number rows for the ``guess`` environment (``task=guess``; the ``guess-agent`` preset).

Each row's answer is a secret from 1 to 20. The warm start demonstrates whole games in the episode's
own rendering: a share of them (:data:`BISECT_DEMO_FRAC`) play by halving the range the environment
reports, the others guess at random in the whole range, ignoring the feedback. Reinforcement
learning has to find out that the feedback pays. The reward comes from the environment (1 at the
solving turn, discounted per turn by ``env.turn_discount``); the task's own reward adds nothing.
"""

from __future__ import annotations

import random

from asyncrl.tasks.base import Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["BISECT_DEMO_FRAC", "GuessTask", "feedback", "guess_text"]

BISECT_DEMO_FRAC = 0.3
LOW, HIGH, MAX_GUESSES = 1, 20, 5
N_TRAIN, N_EVAL = 2000, 200


def feedback(guess: int, secret: int, low: int, high: int) -> tuple[str, int, int]:
    """(the environment's answer, the new low, the new high) after a wrong ``guess``: the direction
    and the range still possible (asyncrl.agents.guess plays it; the demonstrations show it)."""
    if guess < secret:
        low = max(low, guess + 1)
        return f"higher: {low} to {high}", low, high
    high = min(high, guess - 1)
    return f"lower: {low} to {high}", low, high


def guess_text(n: int) -> str:
    return f"<guess>{n}</guess>"


def _game(secret: int, rng: random.Random, bisect: bool) -> str:
    """A demonstrated game after the prompt, ending at the solving guess or after MAX_GUESSES."""
    low, high, parts = LOW, HIGH, []
    for turn in range(MAX_GUESSES):
        guess = (low + high) // 2 if bisect else rng.randint(LOW, HIGH)
        parts.append(f" {guess_text(guess)}")
        if guess == secret or turn == MAX_GUESSES - 1:
            break
        text, low, high = feedback(guess, secret, low, high)
        parts.append(f"\nuser: {text}\nassistant:")
    return "".join(parts)


class GuessTask:
    name = "guess"

    def __init__(self, cfg=None, seed: int = 0):
        del cfg
        rng = random.Random(seed)
        messages = (("user", f"Guess my number from {LOW} to {HIGH}."),)
        splits = {}
        for split, count in (("train", N_TRAIN), ("eval", N_EVAL)):
            splits[split] = tuple(
                Problem(uid=f"guess-{split}-{i}", prompt=render_plain(messages), answer=str(secret),
                        solution=_game(secret, rng, rng.random() < BISECT_DEMO_FRAC), messages=messages)
                for i, secret in enumerate(rng.randint(LOW, HIGH) for _ in range(count)))
        self._splits = splits

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"guess: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """0: the game is scored by the environment's per-turn rewards (asyncrl.agents.guess)."""
        del completion, problem
        return 0.0
