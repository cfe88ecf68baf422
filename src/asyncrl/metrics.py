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


def truncate_rows(path: Path, after_step: int) -> None:
    """Keep the rows of ``path`` (JSON lines with a "step") up to ``after_step``; a torn last line
    (the process was killed mid-write) goes too. Rewritten atomically."""
    if not path.exists():
        return
    kept = []
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and row.get("step", math.inf) <= after_step:
            kept.append(line)
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
        self.file.write(json.dumps(row) + "\n")

    def flush(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        if not self.file.closed:
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
        from asyncrl.tracking.names import tracker_name

        scalars = {}
        for key, value in metrics.items():
            name = tracker_name(key)
            if name and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                scalars[name] = value
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
