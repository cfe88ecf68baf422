"""``asyncrl bench control``: the classic-control policy-lag study as cells, run resumably.

Cells are env × arm × buffer capacity × seed, each one ``python -m asyncrl.control`` process writing
``<out>/runs/<cell>/{metrics.jsonl,summary.json}``. A cell whose summary.json exists is skipped; an
unfinished cell directory is wiped and rerun. ``jobs`` > 1 runs that many cells at once (one torch
thread each); ``ray`` runs each cell as a Ray task (:mod:`asyncrl.bench.executor`). Without Ray, a
cluster works too: give every node the same ``--out`` on shared storage and a disjoint ``--envs`` /
``--methods`` slice, then rerun once without filters to write the combined report.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.console import Console

from asyncrl.bench.executor import run_cells
from asyncrl.bench.runner import check_cell, collect_results, fresh_cell_dir, pending_cells
from asyncrl.bench.suites import Cell, _overrides
from asyncrl.control.arms import ARMS
from asyncrl.control.config import KNOWN_ENVS, MUJOCO_ENVS, make_config, parse_overrides

CAPACITIES = (1, 4, 8, 16)
QUICK_CAPACITIES = (1, 4)
QUICK_ENVS = ("CartPole-v1",)
DEFAULT_SEEDS, QUICK_SEEDS = 5, 2
# --quick: 16 updates of 512 CartPole transitions per cell, 20 cells: a few minutes on 2 cores.
QUICK = {"total_steps": 8192}
FULL: dict[str, object] = {}  # the env presets (CleanRL defaults, 1M steps); override total_steps=...


def _check_known(flag: str, chosen: list, known: tuple) -> None:
    unknown = [c for c in chosen if c not in known]
    if unknown:
        raise ValueError(f"{flag}: unknown {', '.join(map(str, unknown))} (known: {', '.join(map(str, known))})")


def build_control_cells(*, quick: bool = False, seeds: int | None = None, arms: list[str] | None = None,
                        capacities: list[int] | None = None, envs: list[str] | None = None,
                        extra: list[str] | None = None) -> list[Cell]:
    """Every cell, seed-major (a partial run covers every arm); each cell's config is validated here,
    so a bad arm / env / key=value raises ValueError naming it before anything runs."""
    envs = envs or list(QUICK_ENVS if quick else MUJOCO_ENVS)
    arms = arms or list(ARMS)
    capacities = capacities or list(QUICK_CAPACITIES if quick else CAPACITIES)
    _check_known("--envs", envs, KNOWN_ENVS)
    _check_known("--methods", arms, tuple(ARMS))
    if any(c < 1 for c in capacities):
        raise ValueError(f"--ks: buffer capacities must be >= 1, got {capacities}")
    n_seeds = seeds if seeds is not None else (QUICK_SEEDS if quick else DEFAULT_SEEDS)
    if n_seeds < 1:
        raise ValueError("--seeds: must be >= 1")
    tail = tuple(extra or ())
    parse_overrides(list(tail))  # unknown keys / bad values fail here, naming the key
    cells = []
    for seed in range(n_seeds):
        for env in envs:
            for capacity in capacities:
                for arm in arms:
                    switches = {"env_id": env, "arm": arm, "buffer_capacity": capacity, "seed": seed}
                    overrides = _overrides(QUICK if quick else FULL, switches) + tail
                    settings = parse_overrides(list(overrides))
                    make_config(settings.pop("env_id"), **settings)
                    cells.append(Cell(f"{env}-{arm}-n{capacity}-s{seed}", arm, seed, "control", overrides,
                                      {"env": env, "capacity": capacity, "arm": arm}))
    return cells


def cell_command(cell: Cell, runs_dir: Path) -> list[str]:
    return [sys.executable, "-m", "asyncrl.control", *cell.overrides, f"out_dir={runs_dir / cell.name}"]


def run_control_cell(cell: Cell, runs_dir: Path) -> Path:
    """Run one cell unless finished; returns its run directory. Raises BenchError on failure."""
    run_dir = runs_dir / cell.name
    if not fresh_cell_dir(run_dir):
        return run_dir
    log_path = run_dir / "bench.log"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(log_path, "w") as log:
        code = subprocess.run(cell_command(cell, runs_dir), stdout=log, stderr=subprocess.STDOUT,
                              env=env).returncode
    check_cell(cell.name, run_dir, code, log_path)
    return run_dir


def run_control_suite(cells: list[Cell], out_dir: Path, *, quick: bool, command: str, jobs: int = 1,
                      ray: bool = False, report_only: bool = False, console: Console | None = None) -> dict:
    """Run every unfinished cell (``jobs`` at a time, or as Ray tasks), then write results.json and
    the report; ``report_only``: run nothing, report on the finished cells."""
    from asyncrl.bench.control_report import write_control_report

    console = console or Console(stderr=True)
    if report_only:
        return write_control_report(out_dir, collect_results("control", cells, out_dir, quick=quick,
                                                             command=command))
    todo = pending_cells(cells, out_dir, console)

    def done(cell: Cell, run_dir: Path) -> None:
        summary = json.loads((run_dir / "summary.json").read_text())
        score = summary.get("final_score")
        console.print(f"  ✓ {cell.name:<36} final return {'n/a' if score is None else f'{score:9.1f}'}"
                      f"   {summary['env_steps_per_s']:6.0f} steps/s")

    run_cells(todo, functools.partial(run_control_cell, runs_dir=out_dir / "runs"), jobs=jobs, ray=ray, on_done=done)
    return write_control_report(out_dir, collect_results("control", cells, out_dir, quick=quick, command=command))
