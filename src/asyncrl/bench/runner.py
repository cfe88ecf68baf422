"""Run a suite's cells one at a time (resumable), then assemble ``results.json`` and the report.

    <out>/runs/<cell>/          each cell's run directory (summary.json, metrics.jsonl, bench.log)
    <out>/results.json          every run's summary and per-step metrics
    <out>/summary.json, table.md, report.html, figures/*.png      (asyncrl.bench.report)

A cell is finished when its ``summary.json`` exists (runs write it atomically, last); an unfinished
cell directory left by an interrupted run is wiped and the cell runs again. Cells run as
subprocesses by default (``python -m asyncrl.runtime``), so every run starts from a fresh
interpreter (clean RSS figures, a crash cannot take the suite down); short simulated cells can run
in-process (:func:`asyncrl.runtime.train`) to skip ~5 s of imports each.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn

from asyncrl.bench.suites import Cell


class BenchError(RuntimeError):
    """A cell failed or the output directory is unusable; the message is one line."""


def cell_argv(cell: Cell, runs_dir: Path) -> list[str]:
    """The ``asyncrl`` command-line arguments that run one cell by hand (after the program name)."""
    common = [*_config_args(cell), *_cell_overrides(cell, runs_dir)]
    return ["train", *common] if cell.runner == "train" else common


def _cell_overrides(cell: Cell, runs_dir: Path) -> list[str]:
    return [*cell.overrides, f"run.out_dir={runs_dir}", f"run.name={cell.name}", "run.progress=false"]


def _config_args(cell: Cell) -> list[str]:
    from asyncrl.presets import resolve_config_path  # a preset name → its packaged file

    return ["--config", str(resolve_config_path(cell.config).resolve())] if cell.config else []


def _command(cell: Cell, runs_dir: Path) -> list[str]:
    module = "asyncrl.runtime" if cell.runner == "train" else "asyncrl.bench.peer_trl"
    return [sys.executable, "-m", module, *_config_args(cell), *_cell_overrides(cell, runs_dir)]


def _run_in_process(cell: Cell, runs_dir: Path, log_path: Path) -> int:
    from asyncrl.config import load_config
    from asyncrl.runtime import train

    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            train(load_config(cell.config, _cell_overrides(cell, runs_dir)))
            return 0
        except Exception:  # a crashing cell fails the suite with its log, not the bench process
            traceback.print_exc()
            print(f"{sys.exc_info()[0].__name__}: {sys.exc_info()[1]}")
            return 1


def run_cell(cell: Cell, runs_dir: Path, *, in_process: bool = False) -> Path:
    """Run one cell unless it is finished; returns its run directory. Raises BenchError on failure."""
    run_dir = runs_dir / cell.name
    if not fresh_cell_dir(run_dir):
        return run_dir
    log_path = run_dir / "bench.log"
    if in_process and cell.runner == "train":
        code = _run_in_process(cell, runs_dir, log_path)
    else:
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
        with open(log_path, "w") as log:
            code = subprocess.run(_command(cell, runs_dir), stdout=log, stderr=subprocess.STDOUT,
                                  env=env).returncode
    check_cell(cell.name, run_dir, code, log_path)
    return run_dir


def fresh_cell_dir(run_dir: Path) -> bool:
    """False if the cell already finished (its ``summary.json`` exists); else an empty ``run_dir``
    (an interrupted attempt is started over) and True."""
    if (run_dir / "summary.json").exists():
        return False
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    return True


def check_cell(name: str, run_dir: Path, code: int, log_path: Path) -> None:
    """BenchError with the log's last line unless the cell exited 0 and wrote its summary."""
    if code != 0 or not (run_dir / "summary.json").exists():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
        raise BenchError(f"cell {name} failed (exit {code}): {tail[0][:300]} — log: {log_path}")


def _finite_or_none(value):
    """JSON has no NaN: non-finite floats become null in results.json."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_or_none(v) for v in value]
    return value


def load_run(cell: Cell, run_dir: Path) -> dict:
    """One entry of results.json: the cell, its summary and its per-step metrics."""
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics_file = run_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()] \
        if metrics_file.exists() else []
    return {"cell": cell.name, "method": cell.method, "seed": cell.seed, "params": cell.params,
            "summary": summary, "metrics": metrics}


def host_info() -> dict:
    import torch

    from asyncrl import __version__

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"cpus": os.cpu_count(), "gpus": gpus, "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "asyncrl": __version__}


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(_finite_or_none(data), indent=1))
    tmp.rename(path)


def collect_results(suite: str, cells: list, out_dir: Path, *, quick: bool, command: str) -> dict:
    """results.json's dict from the cells that finished (``cells_total`` counts all of them, so a
    report can say it is partial); written to ``out_dir``. BenchError when none has finished."""
    runs_dir = out_dir / "runs"
    finished = [c for c in cells if (runs_dir / c.name / "summary.json").exists()]
    if not finished:
        raise BenchError(f"no cell of this suite has finished in {out_dir}: nothing to report")
    results = {"suite": suite, "quick": quick, "command": command,
               "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "host": host_info(), "cells_total": len(cells),
               "runs": [load_run(c, runs_dir / c.name) for c in finished]}
    _write_json(out_dir / "results.json", results)
    return results


def pending_cells(cells: list, out_dir: Path, console: Console) -> list:
    """The cells without a ``summary.json`` under ``out_dir/runs`` (saying how many are done)."""
    runs_dir = out_dir / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells if not (runs_dir / c.name / "summary.json").exists()]
    if len(todo) < len(cells):
        console.print(f"[dim]{len(cells) - len(todo)} of {len(cells)} cells already finished in {out_dir}[/dim]")
    return todo


def run_suite(suite: str, cells: list[Cell], out_dir: Path, *, quick: bool, command: str,
              in_process: bool = False, jobs: int = 1, ray: bool = False, report_only: bool = False,
              console: Console | None = None) -> dict:
    """Run every unfinished cell (in this process, ``jobs`` subprocesses at a time, or as Ray tasks:
    :mod:`asyncrl.bench.executor`), then write results.json and the report; returns summary.json's dict.
    ``report_only``: run nothing, report on the cells that have finished (a partial report says so)."""
    from asyncrl.bench.executor import run_cells
    from asyncrl.bench.report import write_report

    console = console or Console(stderr=True)
    runs_dir = out_dir / "runs"
    if report_only:
        return write_report(out_dir, collect_results(suite, cells, out_dir, quick=quick, command=command))
    todo = pending_cells(cells, out_dir, console)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    serial = jobs == 1 and not ray
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(suite, total=len(todo))

        def one(cell: Cell) -> Path:  # serial runs name the cell now running
            progress.update(task, description=f"{suite}: {cell.name}")
            return run_cell(cell, runs_dir, in_process=in_process)

        def done(cell: Cell, run_dir: Path) -> None:
            s = json.loads((run_dir / "summary.json").read_text())
            console.print(f"  ✓ {cell.name:<34} eval {_fmt(s.get('initial_eval_reward'))} → "
                          f"{_fmt(s.get('final_eval_reward'))}   train wall {_fmt(s.get('train_wall_s'), 1)} s")
            progress.advance(task)

        run_cells(todo, one if serial else functools.partial(run_cell, runs_dir=runs_dir), jobs=jobs, ray=ray,
                  on_done=done)
    return write_report(out_dir, collect_results(suite, cells, out_dir, quick=quick, command=command))


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
