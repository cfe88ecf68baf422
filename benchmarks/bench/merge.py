"""``--merge DIR ...``: one study from parts of it run apart.

A study too long for one sitting (a session, a machine's lease) runs in parts: the same suite,
options and plan, each part a subset of the cells chosen with ``--only`` and stored in a folder of its
own (results.json + steps.csv.xz, as any study). Merging joins the parts' runs into one study folder
and writes its report, exactly as if one command had run every cell: the statistics read runs, not
where they ran. What differs between the parts (host, commit, date, command) is kept per part in
results.json under ``parts``, and the report names each part, since a speed or a float kernel can
differ between machines.

The parts are chosen so that no cell is in two: by seed (``--only-seeds``, which keeps each seed's
arms, and so its pairs, in one part) or by cell (``--only``). The merged study has as many cells as
its parts planned together, so a part cut off short leaves the merged report partial, saying so.

Refused, in one line and before anything is written: a folder that holds no study or another
suite's; parts whose plans or quick flags differ; parts run on different processors or torch
builds (float kernels differ between them, and with them a warm start trained from the same seed
and every timing); a cell in two parts; and an ``--out`` that already holds a study (a merge never
overwrites a part or a finished report).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from benchmarks.bench.plan_file import PLAN_COPY
from benchmarks.bench.runner import BenchError, stored_results, write_suite_report
from benchmarks.bench.study import has_study_data, write_study_data

PART_KEYS = ("command", "created_at", "host", "cells_total")  # what may differ between parts, kept per part
SAME_KEYS = ("quick", "plan")  # what must not
SAME_HOST_KEYS = ("cpu_model", "torch")


def _same(parts: list[tuple[Path, dict]], key: str, read=lambda results, key: results.get(key)) -> None:
    first_dir, first = parts[0]
    for folder, results in parts[1:]:
        if json.dumps(read(results, key), sort_keys=True) != json.dumps(read(first, key), sort_keys=True):
            raise BenchError(f"--merge: {folder} and {first_dir} differ in {key!r} ({read(results, key)!r} against "
                             f"{read(first, key)!r}): parts of one study share it")


def _host(results: dict, key: str):
    return (results.get("host") or {}).get(key)


def _disjoint(parts: list[tuple[Path, dict]]) -> None:
    owner: dict[str, Path] = {}
    for folder, results in parts:
        for run in results.get("runs") or []:
            if run["cell"] in owner:
                raise BenchError(f"--merge: cell {run['cell']} is in both {owner[run['cell']]} and {folder}")
            owner[run["cell"]] = folder


def _digits(parts: list[tuple[Path, dict]]) -> int | None:
    """The coarsest rounding any part's table had (rounding again to it changes nothing already coarser)."""
    digits = [r["steps_digits"] for _, r in parts if r.get("steps_digits")]
    return min(digits) if digits else None


def merged_results(suite: str, folders: list[Path], command: str | None = None) -> dict:
    """The study the parts in ``folders`` make together (BenchError, one line, if they are not parts
    of one study). The header is the first part's, with ``command`` (the merge's) when given;
    ``created_at`` is the last part's (when the data were complete); ``parts`` records each part's
    folder name, command, date, host and cell count."""
    if len(folders) < 2:
        raise BenchError("--merge: give at least two study folders (the parts of one study)")
    parts = [(folder, stored_results(suite, folder)) for folder in folders]
    for key in SAME_KEYS:
        _same(parts, key)
    for key in SAME_HOST_KEYS:
        _same(parts, key, _host)
    _disjoint(parts)
    first = parts[0][1]
    header = {k: v for k, v in first.items() if k not in ("runs", "parts", "steps_digits")}
    if command is not None:
        header["command"] = command
    header["created_at"] = max(str(r.get("created_at") or "") for _, r in parts) or None
    totals = [r.get("cells_total") for _, r in parts]
    header["cells_total"] = sum(totals) if None not in totals else None
    header["parts"] = [{"folder": folder.name, **{k: r.get(k) for k in PART_KEYS}, "runs": len(r.get("runs") or [])}
                       for folder, r in parts]
    digits = _digits(parts)
    if digits is not None:
        header["steps_digits"] = digits
    return {**header, "runs": [run for _, r in parts for run in r.get("runs") or []]}


def merge_studies(suite: str, folders: list[Path], out_dir: Path, command: str | None = None) -> dict:
    """Write the merged study into ``out_dir`` (its data, the plan copy when the parts have one, and
    the report); returns summary.json's dict."""
    if has_study_data(out_dir):  # a part's own folder too: every part holds a study
        raise BenchError(f"--merge: --out {out_dir} already holds a study; merge into a new folder")
    results = merged_results(suite, folders, command)
    out_dir.mkdir(parents=True, exist_ok=True)
    plan_copy = folders[0] / PLAN_COPY
    if plan_copy.exists():
        shutil.copyfile(plan_copy, out_dir / PLAN_COPY)
    write_study_data(out_dir, results)
    return write_suite_report(out_dir, results)
