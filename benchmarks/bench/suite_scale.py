"""The scale suite: one trainer process against two ``torchrun`` ranks (FSDP2; gloo on the CPU), in
sync and async mode, on the same run. It measures throughput (samples per second over the whole
step, and in the training phase alone, where the ranks share the work) and the time split per step,
and draws the learning curves, which should not depend on the world size (docs/scaling.md).

World 1 runs with one torch thread, and also with as many threads as world 2 has ranks (``-t2``):
the fair question on a machine of two cores is whether two ranks beat one process using both cores.
The ranks of world 2 share the cores out (``policy.torch_threads: 0``: one each on two cores).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.bench import figures as F
from benchmarks.bench import report as R
from benchmarks.bench.cells import Cell, check_known, overrides, params
from benchmarks.bench.stats import compare_arms, group_by_method, run_value, verdicts_within
from benchmarks.bench.suite_a3po import QUICK_COMMON
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells

# (switches, world size): the trainer ranks a method runs with
SCALE_METHODS: dict[str, tuple[dict[str, object], int]] = {
    "sync-w1": ({"run.mode": "sync", "policy.torch_threads": 1}, 1),
    "sync-w1-t2": ({"run.mode": "sync", "policy.torch_threads": 2}, 1),
    "sync-w2": ({"run.mode": "sync"}, 2),
    "async-w1": ({"run.mode": "async"}, 1),
    "async-w2": ({"run.mode": "async"}, 2),
}
METHOD_ORDER = tuple(SCALE_METHODS)
PAIRS = (("sync-w2", "sync-w1"), ("sync-w2", "sync-w1-t2"), ("async-w2", "async-w1"))
EQUIVALENCE_MARGIN = 0.03  # learning curves "within seed noise": final eval reward within 3 points


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    methods = request.methods or list(SCALE_METHODS)
    check_known("--methods", methods, SCALE_METHODS)
    base = suite.base(request)
    cells = []
    for method in methods:
        switches, world = SCALE_METHODS[method]
        cells.append(Cell(f"{method}-s{seed}", method, seed, "train" if world == 1 else "torchrun",
                          overrides(base, switches, {"run.seed": seed}) + request.extra,
                          params(switches, world=world), request.config))
    return cells


def train_phase_samples_per_s(run: Mapping[str, Any]) -> float:
    """Samples per second of the training phase alone: samples_per_s × (step time / train time)."""
    sps, step, train = (run_value(run, key) for key in ("samples_per_s", "time_per_step_s", "train_time_per_step_s"))
    return sps * step / train if train > 0 else math.nan


def build_scale(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, list]:
    """Throughput ratios of two ranks over one process (whole step and training phase), the final eval
    reward's gap (Welch, TOST within 3 points), the time split, learning curves."""
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER)
    train_sps = {m: [train_phase_samples_per_s(r) for r in runs] for m, runs in groups.items()}
    extra: dict[str, Any] = {"train_phase_samples_per_s": {m: _mean(v) for m, v in train_sps.items()},
                             "pairs": {}}
    for two, one in PAIRS:
        if two in groups and one in groups:
            extra["pairs"][f"{two} / {one}"] = {
                "train_phase_speedup": _ratio(_mean(train_sps[two]), _mean(train_sps[one])),
                "samples_per_s_speedup": R.mratio(methods, two, one, "samples_per_s"),
                "eval_gap": compare_arms([run_value(r, "final_eval_reward") for r in groups[two]],
                                         [run_value(r, "final_eval_reward") for r in groups[one]], EQUIVALENCE_MARGIN)}
    verdicts_within([pair["eval_gap"] for pair in extra["pairs"].values()])
    colors = F.method_colors(list(groups))
    figs = R.line_figures(fig_dir, groups, [
        ("fig1_eval_reward.png", {"": "eval_reward"}, "step", "Eval reward vs step", "eval reward",
         "Eval reward vs step (mean over seeds)"),
        ("fig2_reward.png", {"": "reward_mean"}, "step", "Train reward vs step", "train reward",
         "Mean train reward per step (mean over seeds)")], colors)
    cols = [("samples_per_s", "Samples/s (whole step)"), ("time_per_step_s", "Time/step (s)"),
            ("gen_time_per_step_s", "Generation/step (s)"), ("train_time_per_step_s", "Training/step (s)"),
            ("final_eval_reward", "Final eval reward")]
    table = R.method_table(methods, groups, cols, R.CI_CAPTION)
    rows = [f"| {name} | {_num(p['train_phase_speedup'])}× | {_num(p['samples_per_s_speedup'])}× | "
            f"{100 * p['eval_gap']['mean']:+.1f} ({p['eval_gap'].get('verdict', 'undecided')}) |"
            for name, p in extra["pairs"].items()]
    if rows:
        table += ("\n| pair | training-phase samples/s | whole-step samples/s | final eval reward gap, points "
                  "(Welch/TOST ±3) |\n|---|---|---|---|\n" + "\n".join(rows) + "\n")
    return extra, table, figs


def headline_scale(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    lines = []
    for name, pair in (summary.get("pairs") or {}).items():
        gap = pair["eval_gap"]
        lines.append(f"{name}: {_num(pair['train_phase_speedup'])}× the training-phase samples/s, "
                     f"{_num(pair['samples_per_s_speedup'])}× over whole steps; final eval reward "
                     f"{100 * gap['mean']:+.1f} points ({gap.get('verdict', 'undecided')}).")
    return lines or ["No world-1/world-2 pair among these runs."]


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _ratio(a: float, b: float) -> float | None:
    return a / b if math.isfinite(a) and math.isfinite(b) and b > 0 else None


def _num(value: float | None) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.2f}"


SUITE = Suite(
    name="scale", help="one trainer process vs two torchrun ranks (FSDP2), sync and async, on the CPU",
    cells=_cells, quick={**QUICK_COMMON, "trainer.steps": 4},
    full={"trainer.steps": 40, "eval.every": 10, "eval.cache_initial": True}, seeds=1,
    report=build_scale, headline=headline_scale, method_order=METHOD_ORDER,
    takes=frozenset({"config"}), validate=validate_train_cells)
