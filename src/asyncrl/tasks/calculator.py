"""Arithmetic on numbers too large for a small model to compute, with a calculator tool
(``task=calculator``, with ``env.tools=[calculator]``; the ``calculator-agent`` preset).

"What is 48 * 937?": products of a 2-digit and a 3-digit number, or sums of two 5-digit numbers.
The tiny model cannot compute these in its head; it can call the calculator
(``<tool_call>{"name": "calculator", ...}</tool_call>``), read the result and copy it into its answer
(``#### 44976``). The warm start demonstrates both habits on the train split, tokenized turn by
turn as episodes are, trained on the policy's turns only: a share of the worked
solutions (:data:`TOOL_DEMO_FRAC`) call the tool, the others answer directly, as a model without
tools would. Reinforcement learning then has to find out that calling pays. Splits are by a hash
of the question, as in the arithmetic task (train and eval never share one).
"""

from __future__ import annotations

import hashlib
import json
import random

from asyncrl.tasks.base import Problem, extract_answer
from asyncrl.tasks.chat import render_plain

__all__ = ["CalculatorTask", "TOOL_DEMO_FRAC", "tool_call_text"]

TOOL_DEMO_FRAC = 0.5  # worked solutions that call the calculator; the rest answer directly
N_TRAIN, N_EVAL = 2000, 200


def tool_call_text(name: str, arguments: dict) -> str:
    """A call in the Qwen/Hermes form the runtime parses."""
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _question(rng: random.Random) -> tuple[str, int]:
    if rng.random() < 0.5:
        a, b = rng.randint(10, 99), rng.randint(100, 999)
        return f"{a} * {b}", a * b
    a, b = rng.randint(10000, 99999), rng.randint(10000, 99999)
    return f"{a} + {b}", a + b


def _segments(expression: str, answer: int, with_tool: bool) -> tuple[tuple[str, bool], ...]:
    """What follows the prompt, as (text, trained) segments: a tool call, its result (observed, as
    the episode renders it: asyncrl.agents.render.PlainTurns) and the answer; or the answer alone."""
    if not with_tool:
        return ((f" #### {answer}", True),)
    call = tool_call_text("calculator", {"expression": expression})
    return ((f" {call}", True), (f"\ntool: {answer}\nassistant:", False), (f" #### {answer}", True))


class CalculatorTask:
    name = "calculator"

    def __init__(self, cfg=None, seed: int = 0):
        del cfg  # no settings of its own
        rng = random.Random(seed)
        splits: dict[str, list[Problem]] = {"train": [], "eval": []}
        seen: set[str] = set()
        while len(splits["train"]) < N_TRAIN or len(splits["eval"]) < N_EVAL:
            expression, answer = _question(rng)
            if expression in seen:
                continue
            seen.add(expression)
            split = "eval" if int(hashlib.sha1(expression.encode()).hexdigest(), 16) % 10 == 0 else "train"
            if len(splits[split]) >= (N_EVAL if split == "eval" else N_TRAIN):
                continue
            messages = (("user", f"What is {expression}?"),)
            segments = _segments(expression, answer, rng.random() < TOOL_DEMO_FRAC)
            splits[split].append(Problem(
                uid=f"calc-{split}-{len(splits[split])}", prompt=render_plain(messages), answer=str(answer),
                solution="".join(text for text, _ in segments), messages=messages, segments=segments))
        self._splits = {k: tuple(v) for k, v in splits.items()}

    def problems(self, split: str) -> list[Problem]:
        if split not in self._splits:
            raise ValueError(f"calculator: unknown split {split!r} (train, eval)")
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 when the number after the first ``####`` of the final answer is the exact result."""
        return 1.0 if extract_answer(completion) == problem.answer else 0.0
