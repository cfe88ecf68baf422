"""Guess the number: the ``guess`` and ``guess_tail`` tasks' rows and demonstrations, and the
``guess`` environment that plays them (``task=guess env=guess``; the ``guess-agent`` and
``guess-tail`` presets). Registered as ``guess`` in asyncrl.agents.ENVIRONMENTS and as ``guess``,
``guess_tail`` in asyncrl.tasks.TASKS.

**The environment** (:class:`GuessNumber`). The model guesses, the environment answers higher or
lower. The secret is the row's answer, in the row's own range when the row has one (``low``/``high``
columns: task ``guess_tail``), else in the constructor's. Each turn the model writes a guess
("<guess>7</guess>", which ends its turn); the environment answers with the direction and the range
still possible ("higher: 8 to 20"), so that a small model can act on the feedback without holding the
whole history in mind. Solving gives reward 1 at the turn it happens; with ``env.turn_discount``
γ < 1 a solve at turn t is worth γ^(t−1), the score for solving in few turns. A turn without a
readable guess gets an error observation and costs its turn.

**The rows** (:class:`GuessTask`). Each row's answer is a secret from 1 to 20. The warm start
demonstrates whole games in the episode's own rendering: a share of them (:data:`BISECT_DEMO_FRAC`)
play by halving the range the environment reports, the others guess at random in the whole range,
ignoring the feedback. Reinforcement learning has to find out that the feedback pays. The reward
comes from the environment (1 at the solving turn, discounted per turn by ``env.turn_discount``); the
task's own reward adds nothing.

``task=guess_tail`` (the ``guess-tail`` preset) draws a range per row whose size is heavy-tailed, so
that episode lengths are: the range is 1 to 2^k with a truncated power law

    P(k) ∝ k^(−2),  k = 2, ..., 8     (:data:`TAIL_KS`, :data:`TAIL_EXPONENT`)

i.e. P(k) = 0.474, 0.211, 0.119, 0.076, 0.053, 0.039, 0.030: almost half the games are over 1..4,
3 % over 1..256. Bisection needs about log2(range) = k turns (at most k + 1), so the number of
turns follows the same law: a synchronous step waits for its rare games over 1..256 (8 or 9 turns)
while most of its episodes took two or three. Each row carries its range (``fields``: ``low``,
``high``, read by the environment), the prompt states it, and the demonstrated games play in it (the
same bisect/random mix, up to :data:`TAIL_MAX_GUESSES` guesses). The ``guess`` rows are unchanged.
"""

from __future__ import annotations

import random
import re

from asyncrl.tasks.base import Problem
from asyncrl.tasks.chat import render_plain

__all__ = ["BISECT_DEMO_FRAC", "TAIL_EXPONENT", "TAIL_KS", "TAIL_MAX_GUESSES", "GuessNumber", "GuessTask",
           "feedback", "guess_text", "read_guess", "tail_probabilities"]

BISECT_DEMO_FRAC = 0.3
LOW, HIGH, MAX_GUESSES = 1, 20, 5
N_TRAIN, N_EVAL = 2000, 200
# guess_tail: range 1..2^k with P(k) ∝ k^(−TAIL_EXPONENT) over TAIL_KS; a demonstrated game stops
# after TAIL_MAX_GUESSES, more than the k + 1 guesses bisection needs at the largest k
TAIL_KS = tuple(range(2, 9))
TAIL_EXPONENT = 2.0
TAIL_MAX_GUESSES = 10
_GUESS = re.compile(r"<guess>\s*(-?\d{1,6})\s*</guess>")  # the model's guess, one per turn


def tail_probabilities() -> dict[int, float]:
    """{k: P(k)} of guess_tail's range 1..2^k: the truncated power law k^(−TAIL_EXPONENT), normalised."""
    weights = {k: k ** -TAIL_EXPONENT for k in TAIL_KS}
    total = sum(weights.values())
    return {k: w / total for k, w in weights.items()}


def feedback(guess: int, secret: int, low: int, high: int) -> tuple[str, int, int]:
    """(the environment's answer, the new low, the new high) after a wrong ``guess``: the direction
    and the range still possible (:class:`GuessNumber` plays it; the demonstrations show it)."""
    if guess < secret:
        low = max(low, guess + 1)
        return f"higher: {low} to {high}", low, high
    high = min(high, guess - 1)
    return f"lower: {low} to {high}", low, high


def guess_text(n: int) -> str:
    return f"<guess>{n}</guess>"


def _game(secret: int, rng: random.Random, bisect: bool, bounds: tuple[int, int] = (LOW, HIGH),
          max_guesses: int = MAX_GUESSES) -> str:
    """A demonstrated game after the prompt, ending at the solving guess or after ``max_guesses``;
    a random game guesses anywhere in ``bounds``, ignoring the feedback."""
    low, high = bounds
    parts = []
    for turn in range(max_guesses):
        guess = (low + high) // 2 if bisect else rng.randint(*bounds)
        parts.append(f" {guess_text(guess)}")
        if guess == secret or turn == max_guesses - 1:
            break
        text, low, high = feedback(guess, secret, low, high)
        parts.append(f"\nuser: {text}\nassistant:")
    return "".join(parts)


class GuessTask:
    name = "guess"

    def __init__(self, cfg=None, seed: int = 0, tail: bool = False):
        del cfg
        rng = random.Random(seed)
        splits = {}
        for split, count in (("train", N_TRAIN), ("eval", N_EVAL)):
            splits[split] = self._tail_rows(split, count, rng) if tail else self._rows(split, count, rng)
        self._splits = splits
        if tail:
            self.name = "guess_tail"

    @classmethod
    def tail(cls, cfg=None) -> GuessTask:
        """The ``guess_tail`` task (asyncrl.tasks.TASKS): heavy-tailed ranges, see the module."""
        return cls(cfg, tail=True)

    @staticmethod
    def _rows(split: str, count: int, rng: random.Random) -> tuple[Problem, ...]:
        # the draws' order (secret, bisect?, the game's guesses) is what fixes the guess rows
        messages = (("user", f"Guess my number from {LOW} to {HIGH}."),)
        return tuple(
            Problem(uid=f"guess-{split}-{i}", prompt=render_plain(messages), answer=str(secret),
                    solution=_game(secret, rng, rng.random() < BISECT_DEMO_FRAC), messages=messages)
            for i, secret in enumerate(rng.randint(LOW, HIGH) for _ in range(count)))

    @staticmethod
    def _tail_rows(split: str, count: int, rng: random.Random) -> tuple[Problem, ...]:
        probs = tail_probabilities()
        rows = []
        for i in range(count):
            k = rng.choices(list(probs), weights=list(probs.values()))[0]
            low, high = 1, 2 ** k
            secret = rng.randint(low, high)
            bisect = rng.random() < BISECT_DEMO_FRAC
            messages = (("user", f"Guess my number from {low} to {high}."),)
            rows.append(Problem(uid=f"guess_tail-{split}-{i}", prompt=render_plain(messages), answer=str(secret),
                                solution=_game(secret, rng, bisect, (low, high), TAIL_MAX_GUESSES),
                                fields={"low": low, "high": high}, messages=messages))
        return tuple(rows)

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"{self.name}: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """0: the game is scored by the environment's per-turn rewards (:class:`GuessNumber`)."""
        del completion, problem
        return 0.0


def read_guess(text: str) -> int | None:
    """The first ``<guess>N</guess>`` in ``text`` (None when there is none)."""
    match = _GUESS.search(text)
    return int(match.group(1)) if match else None


class GuessNumber:
    """One game per episode; ``low``/``high``: the range the secret is drawn from (the task's) for rows
    that do not carry their own (``guess_tail``'s rows do: the range differs from row to row)."""

    stop = ("</guess>",)  # a turn ends with its guess

    def __init__(self, low: int = 1, high: int = 20):
        self.bounds = (low, high)
        self.secret = self.low = self.high = 0
        self.guesses = 0

    def reset(self, row: dict):
        self.secret = int(row["answer"])
        self.low, self.high = _row_range(row, self.bounds)
        self.guesses = 0
        return row["prompt"]

    def step(self, action: str):
        guess = read_guess(action)
        info = {"secret": self.secret, "solved": False}
        if guess is None:
            info["guesses"] = self.guesses
            return f"no guess read; write <guess>N</guess> from {self.low} to {self.high}", 0.0, False, info
        self.guesses += 1
        info["guesses"] = self.guesses
        if guess == self.secret:
            info["solved"] = True
            return "", 1.0, True, info
        text, self.low, self.high = feedback(guess, self.secret, self.low, self.high)
        return text, 0.0, False, info


def _row_range(row: dict, default: tuple[int, int]) -> tuple[int, int]:
    """The row's ``low``/``high`` when it has them (else ``default``); ValueError naming the field
    when one is missing or the range is empty, so a malformed row fails its reset, not a turn later."""
    if "low" not in row and "high" not in row:
        return default
    for key in ("low", "high"):
        if not isinstance(row.get(key), int) or isinstance(row.get(key), bool):
            raise ValueError(f"row field {key!r}: must be an integer, got {row.get(key)!r}")
    if row["low"] > row["high"]:
        raise ValueError(f"row field 'high': {row['high']} is below low={row['low']}")
    return row["low"], row["high"]
