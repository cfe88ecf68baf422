"""A study folder's stored data: ``results.json`` (one summary per run) and ``steps.csv.xz`` (every
run's per-step metrics in one table).

A study folder is what gets committed and shared::

    README.md  table.md  summary.json  report.html  figures/*.png    what a reader opens
    results.json     the suite, command, host, and per run: cell, method, seed, repeat (``--repeats``
                     only), params, summary, load (the machine's load averages at the cell's start and
                     end: benchmarks.bench.load)
    steps.csv.xz     one row per (run, step): ``cell`` then one column per metric

The per-cell run directories (checkpoints, logs, completions) stay where the run wrote them and are
not part of the study: ``python -m benchmarks SUITE --report-only --out DIR`` rebuilds the report from
these two files alone, in a fresh clone.

Every value in ``steps.csv.xz`` is the JSON text of what the run logged (a float's shortest
round-trip repr, an int, ``null``, a list), and an empty field means the run did not log that key
at that step. So a table read back gives the same Python values, and the same report, as the run
directories did. The table is xz-compressed: a quarter smaller than gzip on these tables, whose
columns repeat across rows, and its header carries no timestamp, so re-rendering an unchanged study
rewrites byte-identical files. A folder written before keeps its ``steps.csv.gz``, which is read alike.

A study written with ``--steps-digits N`` (recorded as ``steps_digits`` in results.json) stores the
per-step diagnostics' floats to N significant digits, and the eval metrics and the step exactly:
every reward, curve and verdict stays exact (the diagnostics' means move in their fifth digit), and
a committed study's table takes a third of the room.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import lzma
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from asyncrl.tracking.metrics import json_safe

RESULTS_FILE = "results.json"
STEPS_FILE = "steps.csv.xz"
GZIP_STEPS_FILE = "steps.csv.gz"  # the table of folders written before the switch to xz
EXACT_PREFIXES = ("eval", "step")  # columns --steps-digits never rounds: what the reports read
RUN_KEYS = ("cell", "method", "seed", "repeat", "params", "summary", "load")  # what results.json keeps of each run


class StudyError(RuntimeError):
    """The study folder is missing a file or holds one that cannot be read; one line."""


def _write_bytes(path: Path, data: bytes) -> None:
    """Atomic: a reader never sees a half-written file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _columns(runs: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every metric key, in the order first logged."""
    seen: dict[str, None] = {}
    for run in runs:
        for rec in run.get("metrics") or []:
            seen.update(dict.fromkeys(rec))
    return list(seen)


def _stored(column: str, value: Any, digits: int | None) -> str:
    """A value's JSON text; a diagnostic's float to ``digits`` significant digits when given."""
    if digits and isinstance(value, float) and math.isfinite(value) and not column.startswith(EXACT_PREFIXES):
        value = float(f"{value:.{digits}g}")
    return json.dumps(value)


def steps_table(runs: list[Mapping[str, Any]], digits: int | None = None) -> bytes:
    """The xz-compressed CSV of every run's per-step metrics (see the module docstring)."""
    columns = _columns(runs)
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(["cell", *columns])
    for run in runs:
        for rec in run.get("metrics") or []:
            writer.writerow([run["cell"], *(_stored(c, rec[c], digits) if c in rec else "" for c in columns)])
    return lzma.compress(text.getvalue().encode("utf-8"), preset=9 | lzma.PRESET_EXTREME)


def write_study_data(out_dir: Path, results: Mapping[str, Any]) -> None:
    """Write results.json (summaries only) and steps.csv.xz for ``results`` (runs carry ``metrics``)."""
    runs = results.get("runs") or []
    header = {k: v for k, v in results.items() if k != "runs"}
    header["runs"] = [{k: run[k] for k in RUN_KEYS if k in run} for run in runs]
    _write_bytes(out_dir / STEPS_FILE, steps_table(runs, results.get("steps_digits")))
    (out_dir / GZIP_STEPS_FILE).unlink(missing_ok=True)  # an older folder's table, now superseded
    _write_bytes(out_dir / RESULTS_FILE, json.dumps(json_safe(header), indent=1).encode("utf-8"))


def read_steps(path: Path) -> dict[str, list[dict]]:
    """{cell: [per-step record, in logged order]} from a steps table."""
    try:
        opener = gzip.open if path.name.endswith(".gz") else lzma.open
        with opener(path, "rt", encoding="utf-8", newline="") as handle:
            reader = csv.reader(handle)
            header = next(reader)
            steps: dict[str, list[dict]] = {}
            for line, row in enumerate(reader, start=2):
                if len(row) != len(header):
                    raise StudyError(f"{path}: line {line} has {len(row)} fields, expected {len(header)}")
                steps.setdefault(row[0], []).append(
                    {key: json.loads(text) for key, text in zip(header[1:], row[1:]) if text != ""})
    except (OSError, EOFError, StopIteration, json.JSONDecodeError, csv.Error, lzma.LZMAError) as err:
        raise StudyError(f"{path}: unreadable steps table ({type(err).__name__}: {err})") from None
    return steps


def has_study_data(out_dir: Path) -> bool:
    return (out_dir / RESULTS_FILE).exists()


def load_study(out_dir: Path) -> dict:
    """results.json with each run's per-step ``metrics`` put back from steps.csv.xz (a run the table
    lacks gets none). StudyError naming the file when either is missing or unreadable."""
    results_path = out_dir / RESULTS_FILE
    try:
        results = json.loads(results_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyError(f"{out_dir}: no {RESULTS_FILE} and no finished cell: nothing to report") from None
    except (OSError, json.JSONDecodeError) as err:
        raise StudyError(f"{results_path}: unreadable ({err})") from None
    steps_path = next((out_dir / name for name in (STEPS_FILE, GZIP_STEPS_FILE) if (out_dir / name).exists()), None)
    steps = read_steps(steps_path) if steps_path is not None else {}
    for run in results.get("runs") or []:
        if "metrics" not in run:  # older folders embedded them in results.json
            run["metrics"] = steps.get(run["cell"], [])
    return results
