"""Per-step rows → ``metrics.jsonl`` (one JSON object per step) and the run's trackers
(TensorBoard, W&B, ...: ``run.report_to``), and the prompt-group ledger → ``ledger.jsonl``.

A resumed run opens them with ``after_step`` = its checkpoint's step: rows of later steps (written
before the run was killed, and about to be redone) are cut off, and TensorBoard is told to purge
its events from that step on, so every step appears once.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from asyncrl.core.disk import DiskFull, writing


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null so every line parses with any JSON reader."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (nested in dicts, lists, tuples) replaced by None: what
    ``json.dumps(..., allow_nan=False)`` accepts (a NaN reward once made summary.json invalid JSON)."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return _clean(value)


def readable_floats(value: Any, digits: int = 12) -> Any:
    """``value`` with every float (nested in dicts, lists, tuples) rounded to ``digits``
    significant digits: 0.16875000000000004 is written 0.16875. For files people read
    (summary.json); 12 digits change nothing but the last bits' noise."""
    if isinstance(value, dict):
        return {k: readable_floats(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [readable_floats(v, digits) for v in value]
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.{digits}g}")
    return value


ROW_FILES = ("metrics.jsonl", "ledger.jsonl", "completions.jsonl")  # a run directory's row files


def kept_rows(path: Path, after_step: int) -> list[str]:
    """The lines of ``path`` (JSON lines with a "step") up to ``after_step``; a torn line (the
    process was killed mid-write) is left out. A row whose "step" is not a number (null: a file
    edited or damaged by hand) raises ValueError naming ``path:LINE``: which rows to keep is unknown."""
    if after_step < 0 or not path.exists():
        return []
    kept = []
    for lineno, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        try:
            row = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue
        if not isinstance(row, dict):
            continue
        step = row.get("step", math.inf)
        if isinstance(step, bool) or not isinstance(step, (int, float)) or math.isnan(step):
            raise ValueError(f"{path}:{lineno}: 'step' is {json.dumps(step)}, not a step number "
                             f"(a damaged row: fix or delete that line)")
        if step <= after_step:
            kept.append(line)
    return kept


def check_row_files(run_dir: Path, after_step: int) -> None:
    """Every row file of ``run_dir`` can be cut back to ``after_step`` (ValueError naming the first
    bad ``file:LINE`` otherwise): checked before a resumed run writes anything."""
    for name in ROW_FILES:
        kept_rows(Path(run_dir) / name, after_step)


def truncate_rows(path: Path, after_step: int) -> None:
    """Keep the rows of ``path`` up to ``after_step`` (none for -1: a run started afresh), as
    :func:`kept_rows` says. Rewritten atomically."""
    if not path.exists():
        return
    kept = kept_rows(path, after_step)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{line}\n" for line in kept))
    os.replace(tmp, path)


class JsonRows:
    """An append-only JSON-lines file of rows keyed by step."""

    def __init__(self, path: Path, after_step: int = 0):
        self.path = Path(path)
        truncate_rows(self.path, after_step)
        self.file = self.path.open("a", buffering=1)

    def append(self, row: dict[str, Any]) -> None:
        """One line (line-buffered: on disk when this returns). A full disk: one line naming this
        file (:class:`asyncrl.core.disk.DiskFull`), and the file cut back to its last whole row."""
        whole = os.fstat(self.file.fileno()).st_size
        try:
            with writing(self.path):
                self.file.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
        except DiskFull:
            self._cut_back(whole)
            raise

    def _cut_back(self, size: int) -> None:
        """Drop a torn last line (and the unwritten rest in the buffer, which closing would retry)."""
        try:
            self.file.close()
        except OSError:
            pass  # the buffer's retry failed again; the descriptor is closed all the same
        os.truncate(self.path, size)
        self.file = self.path.open("a", buffering=1)

    def flush(self) -> None:
        with writing(self.path):
            self.file.flush()
            os.fsync(self.file.fileno())

    def close(self) -> None:
        if not self.file.closed:
            with writing(self.path):
                self.file.close()


class MetricsWriter:
    """``metrics.jsonl`` (the record's flat keys, one row per step; step 0 = the evaluation before
    training) and the run's trackers (namespaced names, see :mod:`asyncrl.tracking.names`)."""

    def __init__(self, run_dir: Path, trackers: list | tuple = (), after_step: int = 0):
        self.rows = JsonRows(Path(run_dir) / "metrics.jsonl", after_step)
        self.path = self.rows.path
        self.trackers = list(trackers)

    def write(self, step: int, metrics: dict[str, Any]) -> None:
        self.rows.append({"step": step, **{k: _clean(v) for k, v in metrics.items()}})
        if not self.trackers:
            return
        from asyncrl.tracking.names import tracker_name, trl_aliases

        scalars = {}
        for key, value in metrics.items():
            name = tracker_name(key)
            if name and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                scalars[name] = value
        for name, value in trl_aliases(metrics).items():  # the same values under TRL's names
            scalars.setdefault(name, value)
        hist = metrics.get("staleness_token_hist")
        for tracker in self.trackers:
            tracker.log_scalars(step, scalars)
            if hist:
                tracker.log_histogram(step, "staleness/token_hist", hist)

    def write_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        for tracker in self.trackers:
            tracker.log_table(step, name, columns, rows)

    def flush(self) -> None:
        self.rows.flush()
        for tracker in self.trackers:
            tracker.flush()

    def close(self) -> None:
        self.rows.close()
        for tracker in self.trackers:
            tracker.close()
        self.trackers = []


class Ledger(JsonRows):
    """Which prompt groups each step trained on (``consumed``) and which it dropped as too stale
    (``dropped``): across kills and resumes, every group appears exactly once."""

    def __init__(self, run_dir: Path, after_step: int = 0):
        super().__init__(Path(run_dir) / "ledger.jsonl", after_step)

    def write(self, step: int, consumed: list[int], dropped: list[int]) -> None:
        self.append({"step": step, "consumed": consumed, "dropped": dropped})
