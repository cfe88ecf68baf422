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
from dataclasses import dataclass, fields
from typing import Any

from asyncrl.core.loader import setting
from asyncrl.tasks.base import Problem, extract_answer, extract_any_answer

__all__ = ["ArithmeticConfig", "ArithmeticTask", "EVAL_BUCKETS", "SPLITS"]

SPLITS = ("train", "eval")
EVAL_BUCKETS = 10
MUL_FACTORS = (2, 9)
MAX_STEPS_LIMIT = 64

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


@dataclass(frozen=True)
class ArithmeticConfig:
    """Knobs of the arithmetic task; every field is validated on construction.

    ``max_value`` bounds the operands of ``+`` and ``-`` (drawn from ``[1, max_value]``)
    and the starting quantity; ``*`` always uses a small factor in ``[2, 9]`` so that
    products stay learnable. With ``allow_negative=False`` subtraction operands are
    drawn from ``[1, min(max_value, total)]`` so running totals never drop below 0.
    """

    # Defaults sized for the embedded 2-minute warm start on a 2-core CPU (see README): operands
    # up to 10, one or two operations; 2,200 distinct problems in all.
    seed: int = setting(0, "random stream of the problem generator")
    min_steps: int = setting(1, "fewest operations per problem")
    max_steps: int = setting(2, "most operations per problem (at most 64)")
    max_value: int = setting(10, "operands of + and - and the start value are in [1, max_value]")
    ops: str = setting("+-", "operations used, a subset of +-* (* uses a factor in [2, 9])")
    n_train: int = setting(2000, "train problems generated")
    n_eval: int = setting(200, "eval problems generated")
    allow_negative: bool = setting(False, "let running totals drop below 0")

    def __post_init__(self) -> None:
        for name in ("seed", "min_steps", "max_steps", "max_value", "n_train", "n_eval"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not isinstance(self.allow_negative, bool):
            raise ValueError(f"allow_negative must be a bool, got {self.allow_negative!r}")
        if not 1 <= self.min_steps <= MAX_STEPS_LIMIT:
            raise ValueError(f"min_steps must be in [1, {MAX_STEPS_LIMIT}], got {self.min_steps}")
        if not self.min_steps <= self.max_steps <= MAX_STEPS_LIMIT:
            raise ValueError(
                f"max_steps must be in [min_steps={self.min_steps}, {MAX_STEPS_LIMIT}], got {self.max_steps}"
            )
        if self.max_value < 1:
            raise ValueError(f"max_value must be >= 1, got {self.max_value}")
        if (
            not isinstance(self.ops, str)
            or not self.ops
            or set(self.ops) - set("+-*")
            or len(set(self.ops)) != len(self.ops)
        ):
            raise ValueError(f"ops must be a non-empty subset of '+-*' without repeats, got {self.ops!r}")
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        if self.n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {self.n_eval}")
        bound = self._content_bound(self.n_train + self.n_eval)
        if self.n_train + self.n_eval > bound:
            raise ValueError(
                f"n_train + n_eval = {self.n_train + self.n_eval} exceeds the at most {bound} distinct "
                "problems this config can produce; raise max_value/max_steps or add ops"
            )

    def _content_bound(self, cap: int) -> int:
        """Upper bound on distinct contents (ignoring the non-negativity rule), capped at ``cap``."""
        per_step = self.max_value * len(set(self.ops) & set("+-"))
        if "*" in self.ops:
            per_step += MUL_FACTORS[1] - MUL_FACTORS[0] + 1
        total = 0
        for steps in range(self.min_steps, self.max_steps + 1):
            total += self.max_value * per_step**steps
            if total >= cap:
                return total
        return total


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
