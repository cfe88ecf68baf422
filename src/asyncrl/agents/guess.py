"""Guess the number: the model guesses, the environment answers higher or lower (``env=guess``).

The secret is the row's answer (task ``guess``, asyncrl.tasks.guess), in the row's own range when
the row has one (``low``/``high`` columns: task ``guess_tail``), else in the constructor's. Each turn
the model writes a guess ("<guess>7</guess>", which ends its turn); the environment answers with the
direction and the range still possible ("higher: 8 to 20"), so that a small model can act on the
feedback without holding the whole history in mind. Solving gives reward 1 at the turn it happens;
with ``env.turn_discount`` γ < 1 a solve at turn t is worth γ^(t−1), the score for solving in few
turns. A turn without a readable guess gets an error observation and costs its turn.
"""

from __future__ import annotations

import re

from asyncrl.tasks.guess import feedback

__all__ = ["GuessNumber", "read_guess"]

_GUESS = re.compile(r"<guess>\s*(-?\d{1,6})\s*</guess>")


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
