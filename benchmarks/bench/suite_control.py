"""The control suite: the classic-control policy-lag study as cells, env × arm × policy-buffer
capacity × seed, each one ``python -m benchmarks.control`` process writing
``<runs>/<cell>/{metrics.jsonl,summary.json}``. Its report pools envs into IQMs with stratified
bootstrap CIs (:mod:`benchmarks.bench.control_report`).

Without Ray, a cluster works too: give every node the same ``--out`` on shared storage and a
disjoint ``--envs`` / ``--methods`` slice, then rerun once without filters to write the combined
report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.bench.cells import Cell, check_known, overrides
from benchmarks.bench.suites import CellRequest, Suite
from benchmarks.control.arms import ARMS
from benchmarks.control.config import KNOWN_ENVS, MUJOCO_ENVS, make_config, parse_overrides
from benchmarks.control.extra import require_control_extra

CAPACITIES = (1, 4, 8, 16)
QUICK_CAPACITIES = (1, 4)
QUICK_ENVS = ("CartPole-v1",)


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    """One seed's cells; each cell's config is validated here, so a bad arm / env / key=value, or
    gymnasium / MuJoCo not installed (the ``control`` extra), raises ValueError naming it before
    anything runs."""
    envs = request.envs or list(QUICK_ENVS if request.quick else MUJOCO_ENVS)
    arms = request.methods or list(ARMS)
    capacities = request.ks or list(QUICK_CAPACITIES if request.quick else CAPACITIES)
    check_known("--envs", envs, KNOWN_ENVS)
    check_known("--methods", arms, tuple(ARMS))
    require_control_extra(envs, "bench control")
    if any(c < 1 for c in capacities):
        raise ValueError(f"--ks: buffer capacities must be >= 1, got {capacities}")
    parse_overrides(list(request.extra))  # unknown keys / bad values fail here, naming the key
    cells = []
    for env in envs:
        for capacity in capacities:
            for arm in arms:
                switches = {"env_id": env, "arm": arm, "buffer_capacity": capacity, "seed": seed}
                cell_overrides = overrides(suite.base(request), switches) + request.extra
                settings = parse_overrides(list(cell_overrides))
                make_config(settings.pop("env_id"), **settings)
                cells.append(Cell(f"{env}-{arm}-n{capacity}-s{seed}", arm, seed, "control", cell_overrides,
                                  {"env": env, "capacity": capacity, "arm": arm}))
    return cells


def _write_report(out_dir, results: dict) -> dict:
    from benchmarks.bench.control_report import write_control_report

    return write_control_report(out_dir, results)


def _done_line(cell: Cell, summary: Mapping[str, Any]) -> str:
    score = summary.get("final_score")
    return (f"  ✓ {cell.name:<36} final return {'n/a' if score is None else f'{score:9.1f}'}"
            f"   {summary.get('env_steps_per_s', float('nan')):6.0f} steps/s")


SUITE = Suite(
    name="control", help="classic control: PPO/KL/SPO/IMPALA/VACO × policy-buffer lag (the [control] extra)",
    cells=_cells,
    # --quick: 16 updates of 512 CartPole transitions per cell, 20 cells: a few minutes on 2 cores
    quick={"total_steps": 8192},
    full={},  # the env presets (CleanRL defaults, 1M steps); override total_steps=...
    seeds=5, quick_seeds=2, write_report=_write_report, takes=frozenset({"ks", "envs"}), done_line=_done_line)
