"""Procedurally generated multi-step arithmetic word problems.

Built for a tiny (~2M parameter) model: the language is a few fixed templates (six
names, eight items, three verbs per operation) so the format is learned in minutes and
the difficulty lies in the arithmetic, which the config controls (steps, operand range,
operations, negative totals).

A problem's *content* is its operand/operation sequence, e.g. ``"23+15-7"``; names,
items and verbs are decoration drawn from the same stream. Splits are assigned by a
SHA-1 of the content alone (1 in :data:`EVAL_BUCKETS` goes to eval), so

* train and eval never share an arithmetic question, even with different decoration;
* the assignment does not depend on the seed or sizes: the eval questions of one seed
  never appear in the train split of another seed or size;
* eval has the same difficulty distribution as train (the hash is uniform).
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import Any

from asyncrl.config.parts import MAX_STEPS_LIMIT, MUL_FACTORS, ArithmeticConfig
from asyncrl.tasks.base import Problem, extract_answer, extract_any_answer

__all__ = ["MAX_STEPS_LIMIT", "MUL_FACTORS", "ArithmeticConfig", "ArithmeticTask", "EVAL_BUCKETS", "SPLITS"]

SPLITS = ("train", "eval")
EVAL_BUCKETS = 10

_NAMES = (("Tom", "He"), ("Sam", "He"), ("Ben", "He"), ("Ana", "She"), ("Mia", "She"), ("Eva", "She"))
_ITEMS = (
    ("apple", "apples"),
    ("pen", "pens"),
    ("coin", "coins"),
    ("card", "cards"),
    ("book", "books"),
    ("egg", "eggs"),
    ("stamp", "stamps"),
    ("marble", "marbles"),
)
_VERBS = {
    "+": ("{p} buys {n} more.", "{p} finds {n} more.", "{p} gets {n} more."),
    "-": ("{p} gives away {n}.", "{p} loses {n}.", "{p} sells {n}."),
    "*": ("Then {q} has {n} times as many.", "Now {q} has {n} times as many."),
}

Step = tuple[str, int]


class ArithmeticTask:
    """Deterministic arithmetic word problems with a 0/1 exact-answer reward."""

    name = "arithmetic"

    @staticmethod
    def config_from(section: Any) -> ArithmeticConfig:
        """This task's settings out of the run config's ``task`` section: its ``task.arithmetic``
        sub-section. ValueError ``"field: message"``, the field relative to ``task.``."""
        if section.arithmetic.n_eval == 0:  # evaluation would divide by zero mid-run
            raise ValueError("arithmetic.n_eval: no eval problems (raise it)")
        if getattr(section, "path", None) is not None:  # never train on arithmetic with a file named
            raise ValueError(f"path: the arithmetic task generates its problems and reads no file; to train on "
                             f"{section.path}, drop task.name (or set task=dataset)")
        return section.arithmetic

    def __init__(self, cfg: ArithmeticConfig | Mapping[str, Any] | None = None) -> None:
        if cfg is None:
            cfg = ArithmeticConfig()
        elif isinstance(cfg, Mapping):
            known = {f.name for f in fields(ArithmeticConfig)}
            unknown = sorted(set(cfg) - known)
            if unknown:
                raise ValueError(f"unknown arithmetic config field(s): {', '.join(map(str, unknown))}")
            cfg = ArithmeticConfig(**cfg)
        elif not isinstance(cfg, ArithmeticConfig):
            raise TypeError(f"expected ArithmeticConfig, mapping or None, got {type(cfg).__name__}")
        self.cfg = cfg
        self._splits: dict[str, tuple[Problem, ...]] | None = None

    def problems(self, split: str) -> list[Problem]:
        """Return the (cached) problems of ``split``; a fresh list each call, same objects."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self._splits is None:
            self._splits = self._generate()
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 iff the first ``####`` answer of ``completion`` equals ``problem.answer``."""
        answer = extract_answer(completion)
        return 1.0 if answer is not None and answer == getattr(problem, "answer", None) else 0.0

    def answer_correct(self, completion: str, problem: Problem) -> bool:
        """Whether ``completion``'s first answer, in either style (``#### 8`` or "The answer is 8"),
        is right: accuracy with the answer format factored out (``eval_answer_acc``)."""
        answer = extract_any_answer(completion)
        return answer is not None and answer == getattr(problem, "answer", None)

    def corpus(self, n: int) -> Iterator[str]:
        """Yield ``n`` ``prompt + solution`` strings from the TRAIN split only, cycling if needed.

        Train only, because this text feeds tokenizer training and SFT: eval questions
        must stay unseen.
        """
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        train = self.problems("train")
        for problem in itertools.islice(itertools.cycle(train), n):
            yield problem.prompt + problem.solution

    def _generate(self) -> dict[str, tuple[Problem, ...]]:
        cfg = self.cfg
        rng = random.Random(cfg.seed)
        quota = {"train": cfg.n_train, "eval": cfg.n_eval}
        seen: dict[str, set[str]] = {s: set() for s in SPLITS}
        out: dict[str, list[Problem]] = {s: [] for s in SPLITS}
        # Enough draws to fill the slower split several times over; only a config whose
        # problem space is nearly exhausted can run out.
        expected = max(cfg.n_train * EVAL_BUCKETS / (EVAL_BUCKETS - 1), cfg.n_eval * EVAL_BUCKETS)
        budget = int(4 * expected) + 10_000
        for _ in range(budget):
            if all(len(out[s]) >= quota[s] for s in SPLITS):
                break
            start, steps = _draw_content(rng, cfg)
            decoration = (rng.choice(_NAMES), rng.choice(_ITEMS), [rng.random() for _ in steps])
            key = content_key(start, steps)
            split = split_of(key)
            if len(out[split]) >= quota[split] or key in seen[split]:
                continue
            seen[split].add(key)
            uid = f"arith-{split}-{len(out[split]):06d}"
            out[split].append(_render(uid, start, steps, *decoration))
        else:
            if not all(len(out[s]) >= quota[s] for s in SPLITS):
                raise ValueError(
                    f"n_train/n_eval: only {len(out['train'])}/{len(out['eval'])} distinct problems after "
                    f"{budget} draws; the problem space is too small (raise max_value/max_steps)"
                )
        return {s: tuple(out[s]) for s in SPLITS}


def content_key(start: int, steps: list[Step]) -> str:
    """Canonical content string, e.g. ``"23+15-7"``; the identity used for dedupe and splits."""
    return str(start) + "".join(f"{op}{n}" for op, n in steps)


def split_of(key: str) -> str:
    """Stable (PYTHONHASHSEED-independent) split assignment of a content key."""
    digest = hashlib.sha1(key.encode("ascii")).digest()
    return "eval" if int.from_bytes(digest[:8], "big") % EVAL_BUCKETS == 0 else "train"


def _draw_content(rng: random.Random, cfg: ArithmeticConfig) -> tuple[int, list[Step]]:
    while True:
        start = rng.randint(1, cfg.max_value)
        total = start
        steps: list[Step] = []
        for _ in range(rng.randint(cfg.min_steps, cfg.max_steps)):
            ops = cfg.ops
            if not cfg.allow_negative and total < 1:
                ops = ops.replace("-", "")
                if not ops:
                    break
            op = rng.choice(ops)
            if op == "+":
                n = rng.randint(1, cfg.max_value)
                total += n
            elif op == "-":
                n = rng.randint(1, cfg.max_value if cfg.allow_negative else min(cfg.max_value, total))
                total -= n
            else:
                n = rng.randint(*MUL_FACTORS)
                total *= n
            steps.append((op, n))
        else:
            return start, steps


def _render(
    uid: str,
    start: int,
    steps: list[Step],
    person: tuple[str, str],
    item: tuple[str, str],
    verb_draws: list[float],
) -> Problem:
    name, pronoun = person
    singular, plural = item
    sentences = [f"{name} has {start} {singular if start == 1 else plural}."]
    equations = []
    total = start
    for (op, n), u in zip(steps, verb_draws):
        templates = _VERBS[op]
        template = templates[int(u * len(templates))]
        sentences.append(template.format(p=pronoun, q=pronoun.lower(), n=n))
        new = total + n if op == "+" else total - n if op == "-" else total * n
        equations.append(f"{total} {op} {n} = {new}.")
        total = new
    sentences.append(f"How many {plural} does {name} have?")
    prompt = "Q: " + " ".join(sentences) + "\nA:"
    solution = " " + " ".join(equations) + f" #### {total}"
    return Problem(uid=uid, prompt=prompt, answer=str(total), solution=solution)
