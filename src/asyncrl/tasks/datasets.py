"""File-backed math tasks: GSM8K-style and MATH-style problems with math-verify rewards.

Records come from a local JSONL file, a Parquet file, or a directory written by
``datasets.Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``; nothing is ever
downloaded. JSONL is validated line by line here (so errors name the exact line);
Parquet and saved datasets are read through the ``datasets`` library with its cache in
a temporary directory that is removed right after loading (nothing lands in
``~/.cache``), and their errors name the row index.

Splits: with ``eval_path`` the eval problems come from that file (and train problems
whose question also appears in eval are dropped); without it, a deterministic
``eval_fraction`` of the train file is held out by a SHA-1 of the whitespace-normalized
question, so duplicates of a question land on the same side and train/eval never share a
question. Rewards: :class:`asyncrl.tasks.math_reward.MathVerifier`.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from asyncrl.tasks.base import Problem
from asyncrl.tasks.math_reward import MathVerifier, last_boxed

__all__ = ["ANSWER_FORMATS", "DatasetConfig", "GSM8KTask", "MathTask", "load_records"]

ANSWER_FORMATS = ("auto", "gsm8k", "boxed", "raw")
SPLITS = ("train", "eval")
_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
_PARQUET_SUFFIXES = (".parquet", ".pq")
# DatasetDict split tried for ``path`` / ``eval_path`` (first present wins).
_DICT_SPLITS = {"train": ("train",), "eval": ("test", "validation", "eval", "valid")}


@dataclass(frozen=True)
class DatasetConfig:
    """Where the problems live and how to read them; validated on construction.

    ``question_field`` / ``answer_field`` may be dotted paths into nested records, with
    integer list indices (DAPO-Math-17k: ``"prompt.0.content"``,
    ``"reward_model.ground_truth"``). ``prompt_template`` gets ``{question}`` replaced
    (plain substitution: other braces, e.g. LaTeX, are kept as they are).
    ``answer_format`` says how the gold answer is read from the answer field:
    ``"gsm8k"`` text after the last ``####``, ``"boxed"`` the last ``\\boxed{...}``,
    ``"raw"`` the field itself, ``"auto"`` the first of these that applies.
    """

    path: str
    eval_path: str | None = None
    eval_fraction: float = 0.1
    question_field: str = "question"
    answer_field: str = "answer"
    prompt_template: str = "Question: {question}\nAnswer:"
    answer_format: str = "auto"
    max_train: int | None = None
    max_eval: int | None = None
    reward_timeout_s: float = 5.0
    reward_workers: int = 1

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
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{name}: must be a non-empty string, got {value!r}")
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


# --- reading records ----------------------------------------------------------------------


def load_records(path: str | os.PathLike, role: str = "train") -> Iterator[tuple[str, dict]]:
    """Yield ``(location, record)`` for every record of ``path``.

    ``location`` is ``"file:LINE"`` for JSONL (1-based physical line), ``"file: item I"``
    for a JSON array file and ``"file: row I"`` (0-based) for Parquet / saved datasets,
    ready to prefix an error message. ``role`` ("train" / "eval") picks the split of a
    saved ``DatasetDict`` ("train"; "test", "validation", "eval" or "valid").
    """
    shown = str(path)
    p = Path(path)
    if not p.exists():
        raise ValueError(f"{shown}: no such file or directory")
    if p.is_dir():
        yield from _rows(_load_saved(p, shown, role), shown)
    elif p.suffix.lower() in _PARQUET_SUFFIXES:
        yield from _rows(_load_parquet(p), shown)
    elif p.suffix.lower() in _JSONL_SUFFIXES:
        yield from _read_json_lines(p, shown)
    else:
        raise ValueError(
            f"{shown}: unsupported file type {p.suffix!r} (expected .jsonl, .json, .parquet or a directory "
            "written by datasets' save_to_disk)"
        )


def _read_json_lines(p: Path, shown: str) -> Iterator[tuple[str, dict]]:
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    if head.startswith(b"["):  # a JSON array file, not JSON lines
        try:
            data = json.loads(p.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{shown}: invalid JSON: {exc}") from None
        for i, record in enumerate(data):
            where = f"{shown}: item {i}"
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record
        return
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            where = f"{shown}:{lineno}"
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: invalid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record


@contextlib.contextmanager
def _quiet_datasets() -> Iterator[Any]:
    """Import ``datasets`` with progress bars off and a throwaway cache directory."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        with tempfile.TemporaryDirectory(prefix="asyncrl-datasets-") as cache_dir:
            yield datasets, cache_dir
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _load_parquet(p: Path) -> list[dict]:
    with _quiet_datasets() as (datasets, cache_dir):
        try:
            ds = datasets.load_dataset(
                "parquet", data_files=str(p), split="train", cache_dir=cache_dir, keep_in_memory=True
            )
        except Exception as exc:  # pyarrow / datasets errors on a corrupt file
            raise ValueError(f"{p}: cannot read Parquet file: {exc}") from None
        return ds.to_list()


def _load_saved(p: Path, shown: str, role: str) -> list[dict]:
    with _quiet_datasets() as (datasets, _):
        try:
            ds = datasets.load_from_disk(str(p), keep_in_memory=True)
        except Exception as exc:
            raise ValueError(f"{shown}: not a dataset saved with save_to_disk: {exc}") from None
        if isinstance(ds, datasets.DatasetDict):
            names = list(ds)
            wanted = _DICT_SPLITS.get(role, (role,))
            chosen = next((s for s in wanted if s in ds), names[0] if len(names) == 1 else None)
            if chosen is None:
                raise ValueError(
                    f"{shown}: DatasetDict has splits {names}; the {role} split must be one of {list(wanted)}"
                )
            ds = ds[chosen]
        return ds.to_list()


def _rows(rows: list[dict], shown: str) -> Iterator[tuple[str, dict]]:
    for i, row in enumerate(rows):
        yield f"{shown}: row {i}", row


_MISSING = object()


def _get_field(record: Any, field: str) -> Any:
    """``record[field]``, or a walk along a dotted path (integer parts index lists)."""
    if isinstance(record, dict) and field in record:
        return record[field]
    node = record
    for part in field.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


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

    def __init__(
        self,
        cfg: DatasetConfig | Mapping[str, Any] | None = None,
        *,
        verifier: MathVerifier | None = None,
    ) -> None:
        if cfg is None:
            raise ValueError(f"path: the {self.name} task needs a DatasetConfig with a data path")
        if isinstance(cfg, Mapping):
            known = {f.name for f in fields(DatasetConfig)}
            unknown = sorted(set(cfg) - known)
            if unknown:
                raise ValueError(f"unknown {self.name} config field(s): {', '.join(map(str, unknown))}")
            cfg = DatasetConfig(**cfg)
        elif not isinstance(cfg, DatasetConfig):
            raise TypeError(f"expected DatasetConfig, mapping or None, got {type(cfg).__name__}")
        for label, path in (("path", cfg.path), ("eval_path", cfg.eval_path)):
            if path is not None and not Path(path).exists():
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

    def _problem(self, where: str, record: dict) -> tuple[str, str, str, str, bool]:
        """(dedupe key, prompt, gold, solution, gold read from a marker?) of one record; raises
        ValueError at ``where``."""
        cfg = self.cfg
        values = {}
        for role, field in (("question", cfg.question_field), ("answer", cfg.answer_field)):
            value = _get_field(record, field)
            if value is _MISSING:
                raise ValueError(f"{where}: missing field {field!r}")
            if role == "answer" and isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # AIME-style integer answer columns
            if not isinstance(value, str):
                raise ValueError(f"{where}: field {field!r} must be a string, got {type(value).__name__}")
            if not value.strip():
                raise ValueError(f"{where}: field {field!r} is empty")
            values[role] = value
        question, text = values["question"].strip(), values["answer"].strip()
        gold, used = self._gold(text, where)
        prompt = cfg.prompt_template.replace("{question}", question)
        body = text if used != "raw" else self._final.format(gold=gold).strip()
        solution = body if prompt[-1:].isspace() else " " + body
        return " ".join(question.split()), prompt, gold, solution, used != "raw"

    def _read(self, path: str, role: str) -> list[tuple[str, str, str, str, bool, str]]:
        """(dedupe key, prompt, gold, solution, marked, where) of every record of ``path``."""
        rows = [(*self._problem(where, record), where) for where, record in load_records(path, role)]
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
        train = self._read(cfg.path, "train")
        if cfg.eval_path is not None:
            evals = self._read(cfg.eval_path, "eval")
            held_out = {key for key, *_ in evals}
            train = [row for row in train if row[0] not in held_out]
        else:
            evals = [row for row in train if _held_out(row[0], cfg.eval_fraction)]
            train = [row for row in train if not _held_out(row[0], cfg.eval_fraction)]
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
                Problem(uid=f"{self.name}-{split}-{i:06d}", prompt=prompt, answer=self._finish_gold(gold),
                        solution=solution)
                for i, (_, prompt, gold, solution, *_) in enumerate(rows)
            )
            for split, rows in (("train", train), ("eval", evals))
        }

    def _finish_gold(self, gold: str) -> str:
        return gold


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
