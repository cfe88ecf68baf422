"""Deterministic stream of training prompts: shuffled epochs over the train split."""

from __future__ import annotations

import random

from asyncrl.tasks import Problem


class PromptStream:
    """``next()`` returns ``per_step`` problems; each epoch is a fresh seeded shuffle."""

    def __init__(self, problems: list[Problem], per_step: int, seed: int):
        if not problems:
            raise ValueError("PromptStream: the train split is empty")
        self.problems = problems
        self.per_step = per_step
        self.rng = random.Random(seed)
        self.queue: list[Problem] = []

    def next(self) -> list[Problem]:
        while len(self.queue) < self.per_step:
            self.queue += self.rng.sample(self.problems, len(self.problems))
        out, self.queue = self.queue[: self.per_step], self.queue[self.per_step:]
        return out

    def state_dict(self) -> dict:
        """The stream's position: its RNG and the rest of the current epoch (as problem indices)."""
        index = {p.uid: i for i, p in enumerate(self.problems)}
        return {"rng": self.rng.getstate(), "queue": [index[p.uid] for p in self.queue]}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.queue = [self.problems[i] for i in state["queue"]]
