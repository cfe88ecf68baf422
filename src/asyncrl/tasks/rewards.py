"""Built-in reward functions, in the form every reward function has (docs/rewards.md):
``fn(completions, **fields) -> list[float]``, named in config by import path.

``correct_answer`` is the default (an empty ``reward.funcs``): the task's own check of each
completion against its problem's gold answer — exact match after the first ``####`` for
``arithmetic``, math-verify equivalence for ``gsm8k`` / ``math`` (through the task, which holds the
verifier's process pool and its timeout).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from asyncrl.tasks.base import Problem, extract_answer
from asyncrl.tasks.chat import completion_text

__all__ = ["correct_answer", "exact_answer"]


def correct_answer(completions: list, *, problems: Sequence[Problem], task: Any, **_: Any) -> list[float]:
    """1.0 where the completion answers its problem correctly by the task's own check, else 0.0.
    Completions are text or conversational (chat prompts), as every reward function receives them;
    an agent episode's answer is its final assistant turn (:func:`completion_text`), never what a
    tool or the environment printed."""
    completions = [completion_text(c) for c in completions]
    many = getattr(task, "reward_many", None)
    if many is not None:
        return list(many(completions, problems))
    return [task.reward(c, p) for c, p in zip(completions, problems)]


def exact_answer(completions: list, *, answer: Sequence[str], **_: Any) -> list[float]:
    """1.0 where the number after the first ``####`` equals the gold ``answer`` (no task needed)."""
    return [1.0 if (got := extract_answer(completion_text(c))) is not None and got == str(gold) else 0.0
            for c, gold in zip(completions, answer)]
