"""The peer-trl suite: TRL's GRPOTrainer beside asyncrl sync and A-3PO, with the same model, task,
batches, sampling and optimizer (the TRL cell runs in :mod:`benchmarks.bench.peer_trl`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from benchmarks.bench import figures as F
from benchmarks.bench import report as R
from benchmarks.bench import wording as W
from benchmarks.bench.cells import Cell, check_known, overrides, params
from benchmarks.bench.speed_report import paired_headline, speed_section
from benchmarks.bench.stats import group_by_method
from benchmarks.bench.suite_a3po import A3PO_METHODS, QUICK_COMMON
from benchmarks.bench.suites import CellRequest, Suite, validate_train_cells

PEER_METHODS: dict[str, dict[str, object]] = {
    "trl-grpo": {"run.mode": "sync"},  # TRL decides the rest
    "asyncrl-sync": A3PO_METHODS["sync"],
    "asyncrl-async-loglinear": A3PO_METHODS["async-loglinear"],
}
RUNNERS = {"trl-grpo": "trl"}  # every other method is an asyncrl run
METHOD_ORDER = tuple(PEER_METHODS)


def _cells(suite: Suite, request: CellRequest, seed: int) -> list[Cell]:
    methods = request.methods or list(PEER_METHODS)
    check_known("--methods", methods, PEER_METHODS)
    base = suite.base(request)
    return [Cell(f"{method}-s{seed}", method, seed, RUNNERS.get(method, "train"),
                 overrides(base, PEER_METHODS[method], {"run.seed": seed}) + request.extra,
                 params(PEER_METHODS[method]), request.config) for method in methods]


def build_peer_trl(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, list]:
    """Throughput ratios and the eval-reward delta against TRL; returns (summary entries, Markdown
    table, figures)."""
    trl, sync, ll = "trl-grpo", "asyncrl-sync", "asyncrl-async-loglinear"
    keys = ("samples_per_s", "time_per_step_s", "final_eval_reward")
    extra = {
        "samples_per_s_ratio_vs_trl": R.mratio(methods, ll, trl, "samples_per_s"),
        "samples_per_s_ratio_sync_vs_trl": R.mratio(methods, sync, trl, "samples_per_s"),
        "eval_reward_delta_vs_trl": R.points_gap(methods, ll, trl, "final_eval_reward"),
        "per_method": {m: {k: s[k] for k in keys} for m, s in methods.items()},
    }
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER)
    colors = F.method_colors(list(groups))
    F.method_bar_chart(fig_dir / "fig1_samples_per_s.png", methods, "samples_per_s",
                       title="Training throughput", ylabel="samples / s", colors=colors,
                       points=R.seed_points(groups, methods, "samples_per_s"))
    figs = [("fig1_samples_per_s.png", "Samples per second per method, error bars = 95% Student-t CI over "
                                       "seeds, dots = seeds.")]
    figs += R.line_figures(fig_dir, groups, [("fig2_eval_reward.png", {"": "eval_reward"}, "step",
                                              "Eval reward vs step", "eval reward", "Eval reward vs step")], colors)
    cols = [("samples_per_s", "Samples/s"), ("time_per_step_s", "Time/step (s)"),
            ("final_eval_reward", "Final eval reward"), ("train_wall_s", "Train wall (s)")]
    table = R.method_table(methods, groups, cols, R.CI_CAPTION)
    speed, speed_md = speed_section(results.get("timed_runs") or results.get("runs") or [],
                                    [(sync, trl), (ll, trl), (ll, sync)], None, NO_IDEAL)
    if speed:
        extra["speed"] = speed
        table += "\n" + speed_md
        if "timed_runs" in results:  # --repeats: the headline ratios over every repeat, not repeat 1
            paired_headline(extra, speed, {"samples_per_s_ratio_vs_trl": (f"{ll} vs {trl}", "samples_per_s"),
                                           "samples_per_s_ratio_sync_vs_trl": (f"{sync} vs {trl}", "samples_per_s")})
    return extra, table, figs


# the a3po suite's overlap ideal bounds async against sync of the same code; TRL differs in code, and
# this suite has not defined an ideal for its own async ÷ sync either
NO_IDEAL = "the peer-trl suite defines no ideal, so no share of one is given"


SUITE = Suite(
    name="peer-trl", help="TRL's GRPOTrainer beside asyncrl sync and A-3PO (needs the [peers] extra)",
    cells=_cells, quick={**QUICK_COMMON, "trainer.steps": 3},
    full={"trainer.steps": 100, "eval.every": 25}, seeds=1,
    report=build_peer_trl, headline=W.headline_peer_trl, method_order=METHOD_ORDER,
    takes=frozenset({"config", "repeats"}), validate=validate_train_cells)
