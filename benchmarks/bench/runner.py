"""Run a suite's cells (resumable), then store the study and write its report.

    <runs>/<cell>/              each cell's run directory (default <out>/runs; not part of the study)
    <out>/results.json          every run's summary and load } the study's data
    <out>/steps.csv.xz          every run's per-step metrics } (benchmarks.bench.study)
    <out>/summary.json, table.md, report.html, figures/*.png      (the suite's report)

A cell is finished when its ``summary.json`` exists (runs write it atomically, last); an unfinished
cell directory left by an interrupted run is wiped and the cell runs again. Cells run as
subprocesses by default (every run starts from a fresh interpreter: clean RSS figures, and a crash
cannot take the suite down); short simulated cells can run in-process
(:func:`asyncrl.runtime.train`) to skip ~5 s of imports each.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import shutil
import subprocess
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn

from benchmarks import checkout_pythonpath
from benchmarks.bench.cell_guard import guarded
from benchmarks.bench.cells import Cell
from benchmarks.bench.load import overload_warning, read_load, record_load
from benchmarks.bench.study import StudyError, load_study, write_study_data
from benchmarks.bench.suites import Suite, get_suite


class BenchError(RuntimeError):
    """A cell failed or the output directory is unusable; the message is one line."""


def _asyncrl_args(cell: Cell, runs_dir: Path) -> list[str]:
    return [*cell.overrides, f"run.out_dir={runs_dir}", f"run.name={cell.name}", "run.progress=false"]


def _config_args(cell: Cell) -> list[str]:
    from asyncrl.config.presets import resolve_config_path  # a preset name → its packaged file

    return ["--config", str(resolve_config_path(cell.config).resolve())] if cell.config else []


@dataclass(frozen=True)
class CellRunner:
    """The program that runs one kind of cell: ``python -m module`` with ``args(cell, runs_dir)``."""

    module: str
    args: Callable[[Cell, Path], list[str]]
    cli: tuple[str, ...] = ()  # the ``asyncrl`` subcommand that runs it by hand, if there is one
    env: dict[str, str] = field(default_factory=dict)
    in_process: bool = False  # can run inside the bench process (asyncrl.runtime.train)


def _asyncrl_command_args(cell: Cell, runs_dir: Path) -> list[str]:
    return [*_config_args(cell), *_asyncrl_args(cell, runs_dir)]


_OFFLINE = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
RUNNERS: dict[str, CellRunner] = {
    "train": CellRunner("asyncrl.runtime", _asyncrl_command_args, ("train",), _OFFLINE, in_process=True),
    # several trainer ranks: torchrun on this machine (a free rendezvous port of its own per cell)
    "torchrun": CellRunner("torch.distributed.run", lambda c, d: [
        "--standalone", "--nproc_per_node", str(c.params["world"]), "-m", "asyncrl.runtime",
        *_asyncrl_command_args(c, d)], env=_OFFLINE),
    "trl": CellRunner("benchmarks.bench.peer_trl", _asyncrl_command_args, env=_OFFLINE),
    "control": CellRunner("benchmarks.control", lambda c, d: [*c.overrides, f"out_dir={d / c.name}"],
                          env={"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}),
}


def cell_command(cell: Cell, runs_dir: Path) -> list[str]:
    """The command that runs one cell by hand: ``asyncrl <subcommand> ...`` where there is one."""
    runner = RUNNERS[cell.runner]
    prefix = ["asyncrl", *runner.cli] if runner.cli else [sys.executable, "-m", runner.module]
    return [*prefix, *runner.args(cell, runs_dir)]


def _run_in_process(cell: Cell, runs_dir: Path, log_path: Path) -> int:
    from asyncrl.runtime.validate import load_run_config
    from asyncrl.runtime import train

    with open(log_path, "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            train(load_run_config(cell.config, _asyncrl_args(cell, runs_dir)))
            return 0
        except Exception:  # a crashing cell fails the suite with its log, not the bench process
            traceback.print_exc()
            print(f"{sys.exc_info()[0].__name__}: {sys.exc_info()[1]}")
            return 1


def run_cell(cell: Cell, runs_dir: Path, *, in_process: bool = False, env: dict[str, str] | None = None) -> Path:
    """Run one cell unless it is finished; returns its run directory. Raises BenchError on failure.
    ``env``: set in the cell's process (over the runner's own)."""
    run_dir = runs_dir / cell.name
    if not fresh_cell_dir(run_dir):
        return run_dir
    log_path = run_dir / "bench.log"
    runner = RUNNERS[cell.runner]
    record_load(run_dir, "start")  # the machine's load beside the cell's timings (benchmarks.bench.load)
    if in_process and runner.in_process:
        code = _run_in_process(cell, runs_dir, log_path)
    else:
        # guarded: the cell ends with this runner, even when it is killed (benchmarks.bench.cell_guard)
        command = guarded([sys.executable, "-m", runner.module, *runner.args(cell, runs_dir)])
        cell_env = {**os.environ, **runner.env, **(env or {})}
        cell_env["PYTHONPATH"] = checkout_pythonpath(cell_env.get("PYTHONPATH"))
        with open(log_path, "w") as log:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env=cell_env).returncode
    record_load(run_dir, "end")
    check_cell(cell.name, run_dir, code, log_path)
    return run_dir


def fresh_cell_dir(run_dir: Path) -> bool:
    """False if the cell already finished (its ``summary.json`` exists); else an empty ``run_dir``
    (an interrupted attempt is started over) and True. A cell another process is running (its run
    holds the directory's lock) fails instead: its live files are never deleted."""
    from asyncrl.core.loader import ConfigError
    from asyncrl.runtime.run_lock import RunLock

    if (run_dir / "summary.json").exists():
        return False
    if run_dir.exists():
        lock = RunLock(run_dir)
        try:
            lock.try_existing()
        except ConfigError as err:
            raise BenchError(f"cell {run_dir.name}: {err}") from None
        try:
            shutil.rmtree(run_dir)
        finally:
            lock.release()
    run_dir.mkdir(parents=True)
    return True


def check_cell(name: str, run_dir: Path, code: int, log_path: Path) -> None:
    """BenchError with the log's last line unless the cell exited 0 and wrote its summary."""
    if code != 0 or not (run_dir / "summary.json").exists():
        tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["(empty log)"]
        raise BenchError(f"cell {name} failed (exit {code}): {tail[0][:300]} — log: {log_path}")


def load_run(cell: Cell, run_dir: Path) -> dict:
    """One run of a study: the cell, its summary and its per-step metrics."""
    summary = json.loads((run_dir / "summary.json").read_text())
    metrics_file = run_dir / "metrics.jsonl"
    metrics = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()] \
        if metrics_file.exists() else []
    run = {"cell": cell.name, "method": cell.method, "seed": cell.seed, "params": cell.params,
           "summary": summary, "metrics": metrics}
    if cell.repeat is not None:  # --repeats: which run of the same work (the speed report pairs by it)
        run["repeat"] = cell.repeat
    load = read_load(run_dir)
    if load is not None:  # cells run before it was recorded have none
        run["load"] = load
    return run


def host_info() -> dict:
    import torch

    from asyncrl import __version__

    gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    return {"cpus": os.cpu_count(), "cpu_model": cpu_model(), "gpus": gpus, "platform": platform.platform(),
            "python": platform.python_version(), "torch": torch.__version__, "asyncrl": __version__,
            **source_revision(), "packages": package_versions()}


def cpu_model() -> str | None:
    """The processor's model name (Linux), recorded because float kernels, and so a warm start
    trained from the same seed, can differ between processors."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


STUDY_PACKAGES = ("transformers", "tokenizers", "numpy", "scipy", "datasets", "math-verify", "trl", "peft",
                  "vllm", "ray", "gymnasium", "gem-llm", "reasoning-gym")


def package_versions() -> dict[str, str]:
    """The installed versions of the packages a study's numbers can depend on (absent ones left out)."""
    from importlib import metadata

    versions = {}
    for name in STUDY_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def source_revision() -> dict:
    """``commit`` (HEAD of the git checkout this apparatus is run from) and ``dirty`` (whether tracked
    files differ from it); both None for an installed wheel or without git, so a reader knows the
    numbers' code is unknown rather than assuming the latest."""
    import subprocess

    src = Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10)
        status = subprocess.run(["git", "-C", str(src), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}
    if commit.returncode != 0 or status.returncode != 0:
        return {"commit": None, "dirty": None}
    return {"commit": commit.stdout.strip(), "dirty": bool(status.stdout.strip())}


def _finished(cells: list[Cell], runs_dir: Path) -> list[Cell]:
    return [c for c in cells if (runs_dir / c.name / "summary.json").exists()]


def collect_results(suite: str, cells: list[Cell], out_dir: Path, *, quick: bool, command: str,
                    runs_dir: Path | None = None, header: dict | None = None) -> dict:
    """The study of the cells that finished in ``runs_dir`` (``cells_total`` counts all of them, so
    a report can say it is partial), stored in ``out_dir`` (results.json, steps.csv.xz) and returned
    with every run's metrics. With no finished cell there, the study already stored in ``out_dir``
    (a committed folder); BenchError when there is neither."""
    runs_dir = runs_dir or out_dir / "runs"
    finished = _finished(cells, runs_dir)
    if not finished:
        stored = stored_results(suite, out_dir)
        digits = (header or {}).get("steps_digits")
        if digits and stored.get("steps_digits") != digits:  # a stored table compacted, its header kept
            stored["steps_digits"] = digits
            write_study_data(out_dir, stored)
            stored = stored_results(suite, out_dir)  # the report from what is stored, as a re-render's
        return stored
    results = {"suite": suite, "quick": quick, "command": command,
               "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
               "host": host_info(), "cells_total": len(cells), **(header or {}),
               "runs": [load_run(c, runs_dir / c.name) for c in finished]}
    out_dir.mkdir(parents=True, exist_ok=True)
    write_study_data(out_dir, results)
    return results


def stored_results(suite: str, out_dir: Path) -> dict:
    """The study stored in ``out_dir`` (BenchError, one line, when there is none or it is another suite's)."""
    try:
        results = load_study(out_dir)
    except StudyError as err:
        raise BenchError(str(err)) from None
    if results.get("suite") != suite:
        raise BenchError(f"{out_dir}: holds a study of suite {results.get('suite')!r}, not {suite!r}")
    return results


def pending_cells(cells: list[Cell], runs_dir: Path, console: Console) -> list[Cell]:
    """The cells without a ``summary.json`` under ``runs_dir`` (saying how many are done)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    todo = [c for c in cells if not (runs_dir / c.name / "summary.json").exists()]
    if len(todo) < len(cells):
        console.print(f"[dim]{len(cells) - len(todo)} of {len(cells)} cells already finished in {runs_dir}[/dim]")
    return todo


def write_suite_report(out_dir: Path, results: dict) -> dict:
    """The suite's report for ``results`` (summary.json, table.md, figures, report.html)."""
    from benchmarks.bench.report import write_report

    return write_report(out_dir, results)


def _default_line(cell: Cell, s: dict) -> str:
    return (f"  ✓ {cell.name:<34} eval {_fmt(s.get('initial_eval_reward'))} → "
            f"{_fmt(s.get('final_eval_reward'))}   train wall {_fmt(s.get('train_wall_s'), 1)} s")


def run_suite(suite: Suite | str, cells: list[Cell], out_dir: Path, *, quick: bool, command: str,
              runs_dir: Path | None = None, in_process: bool = False, jobs: int = 1, ray: bool = False,
              report_only: bool = False, console: Console | None = None, header: dict | None = None) -> dict:
    """Run every unfinished cell (in this process, ``jobs`` subprocesses at a time, or as Ray tasks:
    :mod:`benchmarks.bench.executor`), then store the study and write the report; returns summary.json's
    dict. ``report_only``: run nothing; report on the cells finished in ``runs_dir`` (a partial
    report says so), else re-render the study stored in ``out_dir``. ``header``: what results.json
    records beside the runs (a study's plan)."""
    from benchmarks.bench.executor import run_cells

    suite = get_suite(suite) if isinstance(suite, str) else suite
    console = console or Console(stderr=True)
    runs_dir = runs_dir or out_dir / "runs"
    collect = functools.partial(collect_results, suite.name, cells, out_dir, quick=quick, command=command,
                                runs_dir=runs_dir, header=header)
    if report_only:
        return write_suite_report(out_dir, collect())
    todo = pending_cells(cells, runs_dir, console)
    columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn())
    serial = jobs == 1 and not ray
    line = suite.done_line or _default_line
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task(suite.name, total=len(todo))

        def one(cell: Cell) -> Path:  # serial runs name the cell now running
            progress.update(task, description=f"{suite.name}: {cell.name}")
            return run_cell(cell, runs_dir, in_process=in_process)

        def done(cell: Cell, run_dir: Path) -> None:
            console.print(line(cell, json.loads((run_dir / "summary.json").read_text())))
            warning = overload_warning(cell.name, read_load(run_dir))
            if warning is not None:
                console.print(warning, markup=False, highlight=False)
            progress.advance(task)

        parallel = functools.partial(run_cell, runs_dir=runs_dir, env=shared_cores_env(jobs))
        run_cells(todo, one if serial else parallel, jobs=jobs, ray=ray, on_done=done)
    return write_suite_report(out_dir, collect())


def shared_cores_env(jobs: int) -> dict[str, str]:
    """``OMP_NUM_THREADS`` for cells run ``jobs`` at a time on this machine: each cell's
    ``policy.torch_threads: 0`` then shares out its part of the cores, not all of them. Nothing
    when the user set the variable, or for one job at a time (each cell has the machine)."""
    from asyncrl.config.threads import available_cores

    if jobs <= 1 or "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, available_cores() // jobs))}


def _fmt(value, digits: int = 3) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"
