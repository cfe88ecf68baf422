"""File-backed math tasks: GSM8K-style and MATH-style problems with math-verify rewards.

Records come from local JSONL / JSON / Parquet / Arrow files, ``save_to_disk`` directories or a
Hub name already in the local datasets cache (:mod:`asyncrl.tasks.records`; nothing is ever
downloaded). A row's prompt is either a question string put into ``prompt_template`` or a chat
conversation (a list of ``{role, content}`` messages, :mod:`asyncrl.tasks.chat`).

Splits: with ``eval_path`` (or ``eval_split`` of the same source) the eval problems come from
there (and train problems whose question also appears in eval are dropped); without, a deterministic
``eval_fraction`` of the train file is held out by a SHA-1 of the whitespace-normalized
question, so duplicates of a question land on the same side and train/eval never share a
question; by a SHA-1 of the row's index when one prompt fills more than half the file (an
environment's dataset, whose ``reset`` brings the problem). Rewards: :class:`asyncrl.tasks.math_reward.MathVerifier`.
"""

from __future__ import annotations

import hashlib
from collections import Counter
import itertools
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from asyncrl.config.parts import DatasetFields
from asyncrl.tasks.base import Problem
from asyncrl.tasks.chat import Messages, parse_messages, render_plain, split_reference
from asyncrl.tasks.math_reward import MathVerifier, last_boxed
from asyncrl.tasks.records import MISSING as _MISSING
from asyncrl.tasks.records import get_field as _get_field
from asyncrl.tasks.records import is_hub_name, load_records

__all__ = ["ANSWER_FORMATS", "DatasetConfig", "DatasetFields", "GSM8KTask", "MathTask", "load_records"]

ANSWER_FORMATS = ("auto", "gsm8k", "boxed", "raw")
SPLITS = ("train", "eval")


@dataclass
class DatasetConfig(DatasetFields):
    """Where the problems live and how to read them; validated on construction (``path`` is required).

    ``question_field`` / ``answer_field`` may be dotted paths into nested records, with
    integer list indices (DAPO-Math-17k: ``"prompt.0.content"``,
    ``"reward_model.ground_truth"``). ``prompt_template`` gets ``{question}`` replaced
    (plain substitution: other braces, e.g. LaTeX, are kept as they are).
    ``answer_format`` says how the gold answer is read from the answer field:
    ``"gsm8k"`` text after the last ``####``, ``"boxed"`` the last ``\\boxed{...}``,
    ``"raw"`` the field itself, ``"auto"`` the first of these that applies.
    ``messages_field``: a column holding a chat conversation used as the prompt instead of
    ``question_field`` + ``prompt_template`` (a ``question_field`` that holds such a list is used
    the same way). ``split`` / ``eval_split`` name the splits of a ``DatasetDict`` directory or a Hub
    dataset (``eval_split`` without ``eval_path``: eval comes from that split of ``path``);
    ``subset`` is a Hub dataset's configuration (``main`` for ``openai/gsm8k``).
    """

    # the math tasks' defaults (the run config's ``task`` keys are null = "the task's default")
    question_field: str = "question"
    prompt_template: str = "Question: {question}\nAnswer:"
    # fields that may be None: the task then finds them in each record (the generic task's prompt)
    found_in_records: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.path, (str, os.PathLike)) or not str(self.path).strip():
            raise ValueError(f"path: must be a non-empty path string, got {self.path!r}")
        if self.eval_path is not None and (
            not isinstance(self.eval_path, (str, os.PathLike)) or not str(self.eval_path).strip()
        ):
            raise ValueError(f"eval_path: must be None or a non-empty path string, got {self.eval_path!r}")
        if not _is_number(self.eval_fraction) or not 0.0 <= self.eval_fraction < 1.0:
            raise ValueError(f"eval_fraction: must be a number in [0, 1), got {self.eval_fraction!r}")
        for name in ("question_field", "answer_field"):
            value = getattr(self, name)
            if value is None and name in self.found_in_records:
                continue
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}: must be a non-empty string, got {value!r}")
        for name in ("messages_field", "split", "eval_split", "subset"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ValueError(f"{name}: must be None or a non-empty string, got {value!r}")
        if not isinstance(self.prompt_template, str) or "{question}" not in self.prompt_template:
            raise ValueError(
                f"prompt_template: must be a string containing '{{question}}', got {self.prompt_template!r}"
            )
        if self.answer_format not in ANSWER_FORMATS:
            raise ValueError(f"answer_format: must be one of {', '.join(ANSWER_FORMATS)}, got {self.answer_format!r}")
        for name, low in (("max_train", 1), ("max_eval", 0)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"{name}: must be None or an int >= {low}, got {value!r}")
        timeout = self.reward_timeout_s
        if not _is_number(timeout) or not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"reward_timeout_s: must be a finite number > 0, got {self.reward_timeout_s!r}")
        if not isinstance(self.reward_workers, int) or isinstance(self.reward_workers, bool) or self.reward_workers < 1:
            raise ValueError(f"reward_workers: must be an int >= 1, got {self.reward_workers!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# --- gold answers ---------------------------------------------------------------------------


def extract_gold(text: str, answer_format: str) -> tuple[str | None, str]:
    """``(gold, format used)`` read from a reference answer/solution text; gold None if absent."""
    if answer_format in ("gsm8k", "auto") and "####" in text:
        return text.rsplit("####", 1)[1].strip(), "gsm8k"
    if answer_format == "gsm8k":
        return None, "gsm8k"
    if answer_format in ("boxed", "auto"):
        boxed = last_boxed(text)
        if boxed is not None:
            return boxed.strip(), "boxed"
        if answer_format == "boxed":
            return None, "boxed"
    return text.strip(), "raw"


# --- tasks -----------------------------------------------------------------------------------


class _DatasetTask:
    """Shared loading, splitting and rewarding of the file-backed tasks."""

    name = "dataset"
    # How a raw (marker-less) gold is written at the end of a synthesized SFT solution.
    _final = " #### {gold}"
    config_type: type[DatasetConfig] = DatasetConfig

    @classmethod
    def config_from(cls, keys: DatasetFields) -> DatasetConfig:
        """This task's settings out of the run config's ``task`` section (which holds the
        :class:`DatasetFields` keys), with the checks that need the task's name or the files.
        ValueError ``"field: message"``, the field relative to ``task.``."""
        if keys.path is None:
            raise ValueError(f"path: task {cls.name!r} reads a local file; set task.path=<jsonl|parquet|dir>")
        values = {f.name: getattr(keys, f.name) for f in fields(DatasetFields)}
        # a null key means "this task's default": the config type's own
        cfg = cls.config_type(**{k: v for k, v in values.items() if v is not None or k not in _TASK_DEFAULTED})
        for name in ("path", "eval_path"):
            value = getattr(cfg, name)
            if value is not None and not Path(value).exists() and not is_hub_name(value):
                raise ValueError(f"{name}: no such file or directory: {value}")
        return cfg

    def __init__(
        self,
        cfg: DatasetConfig | Mapping[str, Any] | None = None,
        *,
        verifier: MathVerifier | None = None,
    ) -> None:
        if cfg is None:
            raise ValueError(f"path: the {self.name} task needs a DatasetConfig with a data path")
        if isinstance(cfg, Mapping):
            known = {f.name for f in fields(self.config_type)}
            unknown = sorted(set(cfg) - known)
            if unknown:
                raise ValueError(f"unknown {self.name} config field(s): {', '.join(map(str, unknown))}")
            cfg = self.config_type(**cfg)
        elif not isinstance(cfg, DatasetConfig):
            raise TypeError(f"expected DatasetConfig, mapping or None, got {type(cfg).__name__}")
        for label, path in (("path", cfg.path), ("eval_path", cfg.eval_path)):
            if path is not None and not Path(path).exists() and not is_hub_name(path):
                raise ValueError(f"{label}: {path}: no such file or directory")
        self.cfg = cfg
        self._verifier = verifier
        self._owns_verifier = verifier is None
        self._splits: dict[str, tuple[Problem, ...]] | None = None
        self._sources: dict[str, str] = {}

    # -- Task protocol --

    def problems(self, split: str) -> list[Problem]:
        """The (cached) problems of ``split``: a fresh list each call, same objects."""
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        if self._splits is None:
            self._splits = self._load()
        return list(self._splits[split])

    def reward(self, completion: str, problem: Problem) -> float:
        """1.0 iff the completion's final answer is math-verify-equivalent to ``problem.answer``."""
        return self.reward_many([completion], [problem])[0]

    def reward_many(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[float]:
        """Batch version of :meth:`reward` (one round trip to the verifier pool)."""
        if len(completions) != len(problems):
            raise ValueError(f"reward_many: {len(completions)} completions for {len(problems)} problems")
        golds = [getattr(p, "answer", "") for p in problems]
        return self.verifier.score_many(list(completions), golds)

    # -- extras --

    @property
    def verifier(self) -> MathVerifier:
        if self._verifier is None:
            self._verifier = MathVerifier(self.cfg.reward_timeout_s, self.cfg.reward_workers)
        return self._verifier

    def corpus(self, n: int) -> Iterator[str]:
        """``n`` ``prompt + solution`` strings from the TRAIN split, cycling if needed."""
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"n must be a non-negative int, got {n!r}")
        train = self.problems("train")
        for problem in itertools.islice(itertools.cycle(train), n):
            yield problem.prompt + problem.solution

    def close(self) -> None:
        """Stop the verifier's worker processes if this task started them."""
        if self._owns_verifier and self._verifier is not None:
            self._verifier.close()
            self._verifier = None

    def __enter__(self):
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self._owns_verifier:
            state["_verifier"] = None  # a process pool does not travel; the copy starts its own
        return state

    # -- loading --

    def _gold(self, text: str, where: str) -> tuple[str, str]:
        gold, used = extract_gold(text, self.cfg.answer_format)
        if gold is None:
            what = "'####' marker" if used == "gsm8k" else "\\boxed{...} answer"
            raise ValueError(f"{where}: no {what} in field {self.cfg.answer_field!r}")
        if not gold:
            raise ValueError(f"{where}: empty answer in field {self.cfg.answer_field!r}")
        return gold, used

    def _problem(self, where: str, record: dict) -> tuple[str, str | Messages, str, str, bool]:
        """(dedupe key, prompt, gold, solution, gold read from a marker?) of one record; the prompt is
        a string, or the conversation of a chat row. Raises ValueError at ``where``."""
        cfg = self.cfg
        key, prompt, reference = self._prompt_of(where, record)
        field = cfg.answer_field
        value = _get_field(record, field)
        if value is _MISSING and reference is not None:  # a chat row's trailing assistant turn
            value, field = reference, f"{self.prompt_column(where, record)} (last assistant message)"
        if value is _MISSING:
            raise ValueError(f"{where}: missing field {field!r}")
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)  # AIME-style integer answer columns
        if not isinstance(value, str):
            raise ValueError(f"{where}: field {field!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{where}: field {field!r} is empty")
        text = value.strip()
        gold, used = self._gold(text, where)
        shown = prompt if isinstance(prompt, str) else render_plain(prompt)
        body = text if used != "raw" else self._final.format(gold=gold).strip()
        solution = body if shown[-1:].isspace() else " " + body
        return key, prompt, gold, solution, used != "raw"

    def prompt_column(self, where: str, record: dict) -> str:
        """The field a record's prompt is read from (a hook: the generic task finds it)."""
        return self.cfg.messages_field or self.cfg.question_field

    def _prompt_of(self, where: str, record: dict) -> tuple[str, str | Messages, str | None]:
        """(dedupe key, prompt string or conversation, a chat row's reference answer or None)."""
        cfg = self.cfg
        field = self.prompt_column(where, record)
        value = _get_field(record, field)
        if value is _MISSING:
            raise ValueError(f"{where}: missing field {field!r}")
        if cfg.messages_field is not None or isinstance(value, (list, tuple)):
            messages, reference = split_reference(parse_messages(value, where, field))
            if not messages:
                raise ValueError(f"{where}: field {field!r} holds only assistant messages (no prompt)")
            return " ".join(render_plain(messages).split()), messages, reference
        if not isinstance(value, str):
            raise ValueError(f"{where}: field {field!r} must be a string, got {type(value).__name__}")
        if not value.strip():
            raise ValueError(f"{where}: field {field!r} is empty")
        question = value.strip()
        return " ".join(question.split()), cfg.prompt_template.replace("{question}", question), None

    def _read(self, path: str, role: str, split: str | None) -> list[tuple[str, str, str, str, bool, str]]:
        """(dedupe key, prompt, gold, solution, marked, where) of every record of ``path``."""
        records = load_records(path, role, split=split, subset=self.cfg.subset)
        rows = [(*self._problem(where, record), _Where(where, record)) for where, record in records]
        self._check_golds(rows)
        return rows

    def _check_golds(self, rows: list[tuple[str, str, str, str, bool, str]]) -> None:
        """Hook: warn about gold answers that no completion can match (GSM8K: no digit)."""

    def source(self, uid: str) -> str:
        """Where problem ``uid`` came from (``file:LINE`` / ``file: row I``), for error messages."""
        if self._splits is None:
            self._splits = self._load()
        return self._sources.get(uid, uid)

    def _load(self) -> dict[str, tuple[Problem, ...]]:
        cfg = self.cfg
        train = self._read(cfg.path, "train", cfg.split)
        if cfg.eval_path is not None or cfg.eval_split is not None:
            evals = self._read(cfg.eval_path or cfg.path, "eval", cfg.eval_split)
            held_out = {key for key, *_ in evals}
            train = [row for row in train if row[0] not in held_out]
        else:
            keys = _split_keys([row[0] for row in train])
            evals = [row for row, key in zip(train, keys) if _held_out(key, cfg.eval_fraction)]
            train = [row for row, key in zip(train, keys) if not _held_out(key, cfg.eval_fraction)]
        if cfg.max_train is not None:
            train = train[: cfg.max_train]
        if cfg.max_eval is not None:
            evals = evals[: cfg.max_eval]
        if not train:
            raise ValueError(f"path: {cfg.path}: no training problems left after holding out eval problems")
        self._sources = {f"{self.name}-{split}-{i:06d}": row[-1]
                         for split, rows in (("train", train), ("eval", evals)) for i, row in enumerate(rows)}
        return {
            split: tuple(
                Problem(uid=f"{self.name}-{split}-{i:06d}", answer=self._finish_gold(gold), solution=solution,
                        fields=self.row_fields(getattr(where, "record", {})), **_prompt_fields(prompt))
                for i, (_, prompt, gold, solution, *_, where) in enumerate(rows)
            )
            for split, rows in (("train", train), ("eval", evals))
        }

    def _finish_gold(self, gold: str) -> str:
        return gold

    def row_fields(self, record: dict) -> dict:
        """The columns reward functions receive as keyword arguments (a hook): the whole record."""
        return record


_TASK_DEFAULTED = ("question_field", "prompt_template")


def _prompt_fields(prompt: str | Messages) -> dict:
    """A Problem's prompt fields: a chat row keeps its conversation and a plain rendering of it."""
    if isinstance(prompt, str):
        return {"prompt": prompt}
    return {"prompt": render_plain(prompt), "messages": prompt}


class _Where(str):
    """A record's location (``file:LINE``), carrying the record itself: its columns become the
    problem's row fields for reward functions, whatever the row tuples hold besides."""

    record: dict

    def __new__(cls, where: str, record: dict) -> "_Where":
        self = super().__new__(cls, where)
        self.record = record if isinstance(record, dict) else {}
        return self

    def __reduce__(self):  # a task pickles with its sources
        return _Where, (str(self), self.record)


def _split_keys(questions: list[str]) -> list[str]:
    """What the eval split hashes, per row: the question, so that duplicates of a question land on
    one side; by row instead when one prompt covers more than half the rows. Such a prompt holds no
    problem (TRL's ``environment_factory`` datasets repeat one system message and the environment's
    ``reset`` brings the problem): by text, every row would land on one side."""
    if questions:
        top = max(Counter(questions).values())
        if top > len(questions) / 2 and top > 1:
            return [f"row {i}" for i in range(len(questions))]
    return questions


def _held_out(key: str, fraction: float) -> bool:
    """Stable (PYTHONHASHSEED-independent) eval assignment of a normalized question."""
    digest = hashlib.sha1(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") < fraction * 2**64


class GSM8KTask(_DatasetTask):
    """Grade-school math word problems (GSM8K format: solution text ending in ``#### 72``).

    Gold answer: text after the last ``####``, commas removed (``"1,234"`` -> ``"1234"``).
    """

    name = "gsm8k"
    _final = " #### {gold}"

    def _finish_gold(self, gold: str) -> str:
        return gold.replace(",", "").strip()

    def _check_golds(self, rows: list[tuple[str, str, str, str, bool, str]]) -> None:
        """A GSM8K gold without a digit (``#### banana``) scores 0 for every completion: say so,
        naming the lines (a warning, not an error: one odd line in 7,000 should not stop a run).
        When every '####' gold of a file is like that, it is the wrong file or field: an error."""
        import sys

        bad = [where for _, _, gold, _, _, where in rows if not any(c.isdigit() for c in gold)]
        marked = [where for _, _, gold, _, mark, where in rows if mark]
        if marked and set(marked) <= set(bad):  # nothing could ever be rewarded
            raise ValueError(f"{marked[0]}: no gold answer in this file has a number (GSM8K answers are "
                             f"numbers after '####'; field {self.cfg.answer_field!r})")
        if bad:
            shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
            print(f"asyncrl: warning: {len(bad)} gold answer(s) with no number can never be matched "
                  f"(reward 0 for every completion): {shown}", file=sys.stderr)


class MathTask(_DatasetTask):
    """Competition math (MATH / MATH500 / AIME / DAPO-Math-17k style records).

    Gold answer: the last ``\\boxed{...}`` of the answer field when it holds a worked
    solution (point ``answer_field`` at ``"solution"``), else the answer field itself.
    """

    name = "math"
    _final = " \\boxed{{{gold}}}"
