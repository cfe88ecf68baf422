"""Task interface shared by every embedded task, plus the GSM8K-style answer parser.

A task is a deterministic list of :class:`Problem` per split and a binary reward. The
reward is computed from the *first* ``####`` marker of a completion (see
:func:`extract_answer`), so every task that uses the ``#### <number>`` convention gets
the same, hard-to-game answer format.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["ANSWER_MARKER", "MAX_ANSWER_DIGITS", "Problem", "Task", "extract_answer", "extract_any_answer"]

ANSWER_MARKER = "####"
_ANY_MARKER = re.compile(r"####|answer is", re.IGNORECASE)

# Answers longer than this are treated as malformed: no task here has such answers, and a
# bound keeps the parser O(1) after the marker however much a policy babbles.
MAX_ANSWER_DIGITS = 40

# Only the first few characters after the (whitespace-stripped) marker are inspected.
_WINDOW = 2 * MAX_ANSWER_DIGITS + 16

# ASCII only: the tokenizer sees ASCII digits, and accepting e.g. Arabic-Indic or
# full-width digits would make two different strings "equal" answers for no benefit.
_NUMBER = re.compile(
    r"""
    \$?(?P<sign>[+-]?)\$?                           # optional sign, "$" before or after it
    (?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)        # 1234 or correctly grouped 1,234
    (?:\.(?P<frac>[0-9]+))?                         # optional decimals
    """,
    re.ASCII | re.VERBOSE,
)


@dataclass(frozen=True)
class Problem:
    """One question with its canonical answer and a worked solution.

    ``prompt`` ends exactly with ``"\\nA:"`` so that generation starts right where the
    solution does; ``solution`` starts with a space, has no trailing newline and ends
    with ``"#### <answer>"``, so ``prompt + solution`` is a complete SFT example.

    ``messages``: a chat-format prompt as ``(role, content)`` pairs (rendered with the tokenizer's
    chat template); ``prompt`` then holds its template-free rendering. None for plain prompts.
    ``segments``: see the field.
    """

    uid: str
    prompt: str
    answer: str
    solution: str
    # the record's own columns (file-backed tasks): reward functions receive them as row fields
    fields: Mapping[str, Any] = field(default_factory=dict, hash=False, compare=False, repr=False)
    messages: tuple[tuple[str, str], ...] | None = None
    # a demonstrated episode (agents): the solution as (text, trained) segments, joined = solution
    # (less EOS_SEGMENT). The warm start tokenizes each segment on its own, as an episode does, and
    # trains on the policy's turns only (an observation is the environment's, not the policy's to predict)
    segments: tuple[tuple[str, bool], ...] | None = None


# A segment of this text alone stands for the tokenizer's eos token: a turn that ends at eos (a game
# with no stop string) ends so in its demonstration too. A private-use character: no real text has it.
EOS_SEGMENT = "\ue000"


@runtime_checkable
class Task(Protocol):
    """What the trainer needs from a task: problems per split and a 0/1 reward."""

    name: str

    def problems(self, split: str) -> list[Problem]:
        """Return the problems of ``split`` ("train" or "eval"); deterministic per config."""
        ...

    def reward(self, completion: str, problem: Problem) -> float:
        """Return 1.0 if ``completion`` answers ``problem`` correctly, else 0.0; never raises."""
        ...


def _normalize(sign: str, int_part: str, frac: str | None) -> str:
    int_part = int_part.replace(",", "").lstrip("0") or "0"
    frac = (frac or "").rstrip("0")
    body = f"{int_part}.{frac}" if frac else int_part
    if sign == "-" and body != "0":
        return "-" + body
    return body


def extract_answer(text: str) -> str | None:
    """Return the normalized number after the FIRST ``####`` in ``text``, or None.

    Why the first marker: the answer a policy commits to is the one it writes first.
    Reading the last marker (or any marker) would reward a completion that hedges with
    several answers or "corrects" itself while babbling past the end, which is a noisy
    and exploitable RL signal. Everything after the number is ignored.

    Accepted after the marker: ASCII whitespace, a leading ``+``/``-``, ``$`` before or
    after the sign, thousands commas in correct groups (``1,234``), decimals, and any
    trailing text that does not continue the number (``"12."``, ``"12 apples"``).
    Normalization: commas, ``+`` and leading zeros are dropped, trailing decimal zeros
    are dropped (``3.50`` -> ``3.5``, ``2.0`` -> ``2``) and ``-0`` becomes ``0``.

    Returns None for: no marker, nothing number-like right after it, a number glued to
    a letter/digit-continuation (``1e5``, ``12abc``, ``1,23``, ``1.2.3``: ambiguous, so
    no credit), non-ASCII digits, more than :data:`MAX_ANSWER_DIGITS` digits, and any
    non-``str`` input. Never raises.
    """
    if not isinstance(text, str):
        return None
    start = text.find(ANSWER_MARKER)
    if start < 0:
        return None
    return _number_at(text, start + len(ANSWER_MARKER))


def extract_any_answer(text: str) -> str | None:
    """The number after the first answer marker of *any* style: ``####`` or "answer is" (any case).

    A format-agnostic reading of what a completion answers: the embedded task's warm start writes
    some solutions as "... The answer is 8." which the reward (``####`` only) rejects. Scoring
    with this as well separates learning the arithmetic from learning the answer format. The
    number is parsed and normalized exactly as :func:`extract_answer` does; never raises.
    """
    if not isinstance(text, str):
        return None
    match = _ANY_MARKER.search(text)
    return None if match is None else _number_at(text, match.end())


def _number_at(text: str, pos: int) -> str | None:
    """The normalized number starting at ``text[pos:]`` after whitespace (rules: extract_answer)."""
    rest = text[pos:].lstrip(" \t\r\n\f\v")[:_WINDOW]
    match = _NUMBER.match(rest)
    if match is None:
        return None
    tail = rest[match.end() :]
    if tail[:1].isalnum() or tail[:1] == "_":
        return None
    if tail[:1] in (",", ".") and tail[1:2].isdigit():
        return None
    int_part, frac = match.group("int"), match.group("frac")
    n_digits = len(int_part.replace(",", "")) + len(frac or "")
    if n_digits > MAX_ANSWER_DIGITS:
        return None
    return _normalize(match.group("sign"), int_part, frac)
