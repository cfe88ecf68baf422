"""The agent suite's report: throughput of each async arm against sync and against the ideal overlap,
the oldest-token staleness, what the buffer dropped, the realised turns per episode, and the eval
reward against sync with the tests every suite uses.

Numbers per arm (mean over seeds, 95 % t interval):

* throughput: ``samples_per_s`` (samples trained per second of the training loop, from the run's
  summary) and episodes/s (episodes generated per second of the loop: the per-step
  ``episode/count`` summed, over ``train_wall_s``; in sync every generated episode is trained, in
  async some wait in the buffer at the end or are dropped);
* the ideal overlap: sync's measured generation and training time per step, T_gen and T_train; with
  generation perfectly overlapped with training a step costs max(T_gen, T_train) instead of the
  sum, so no async arm can beat sync by more than (T_gen + T_train) / max(T_gen, T_train) (the
  a3po suite's ``ideal_overlap``); each async arm's samples/s ÷ sync's, and that ratio's share of
  the ideal;
* staleness of each episode's oldest token (``staleness_seq_mean`` / ``_max`` per step): a run's
  mean over steps and its largest, and the token-staleness distribution (``staleness_token_hist``);
* dropped samples (``dropped_samples_total``: too stale when consumed) and lost units
  (``lost_units_total``); the buffer does not count admissions it held back, so the pacing shows
  as the trainer's wait per step (``wait_time_per_step_s``) and the generator's busy share;
* turns per episode (``episode/turns_mean`` weighted by ``episode/count``, the largest
  ``episode/turns_max``), episode length (``episode/len_p90``) and the share that hit
  ``env.max_turns``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import figures as F
from . import wording as W
from .report import CI_CAPTION, FigureList, line_figures, mean, method_table, mratio, ratio, seed_points
from .stats import as_float, final_reward_gap, finite, group_by_method, seed_stat, verdicts_within

METHOD_ORDER = ("sync", "async-loglinear-k1", "async-loglinear-k2", "async-loglinear-k4", "async-recompute-k2")
EQUIVALENCE_MARGIN = 0.03  # TOST margin in eval reward, as the a3po suite: within 3 points
SYNC = "sync"

AGENT_LINES = (
    ("fig3_turns.png", {"mean": "episode/turns_mean", "max": "episode/turns_max"}, "step",
     "Turns per episode vs step", ["mean turns per episode", "longest episode (turns)"],
     "Turns per episode of the episodes that arrived in each step (mean and longest)"),
    ("fig4_eval_reward.png", {"": "eval_reward"}, "step", "Eval reward vs step", "eval reward", "Eval reward vs step"),
)


def ideal_overlap(t_gen: float, t_train: float) -> float | None:
    """(T_gen + T_train) / max(T_gen, T_train): the speed-up of perfect overlap over a step that does
    one then the other (None when a time is missing). As a3po_report's ``ideal_overlap``."""
    return ratio(t_gen + t_train, max(t_gen, t_train))


# ---- per-run values read from the step records -----------------------------------------------

def _steps(run: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The training steps' records (step 0 is the evaluation before training)."""
    return [r for r in run.get("metrics") or [] if as_float(r.get("step")) > 0]


def _last(run: Mapping[str, Any], key: str) -> float:
    """The last logged value of a cumulative step metric (NaN when never logged)."""
    values = [as_float(r.get(key)) for r in _steps(run) if key in r]
    return values[-1] if values else math.nan


def _per_episode(key: str, absent: float | None = None):
    """A per-run mean over episodes of a step metric that is itself a mean over the step's episodes:
    each step weighted by its ``episode/count``. ``absent``: the value of a step that has episodes but
    not the key (``episode/end_<why>`` is logged only for the reasons that happened: 0 otherwise)."""
    def value(run: Mapping[str, Any]) -> float:
        pairs = [(as_float(r.get(key, absent)), as_float(r.get("episode/count"))) for r in _steps(run)]
        pairs = [(v, n) for v, n in pairs if math.isfinite(v) and math.isfinite(n) and n > 0]
        total = sum(n for _, n in pairs)
        return sum(v * n for v, n in pairs) / total if total else math.nan
    return value


def _episodes_per_s(run: Mapping[str, Any]) -> float:
    counts = finite(as_float(r.get("episode/count")) for r in _steps(run))
    wall = as_float((run.get("summary") or {}).get("train_wall_s"))
    return float(counts.sum()) / wall if counts.size and math.isfinite(wall) and wall > 0 else math.nan


def _step_stat(key: str, how: str):
    """A per-run value of a step metric: its mean or its max over the training steps."""
    def value(run: Mapping[str, Any]) -> float:
        vals = finite(as_float(r.get(key)) for r in _steps(run))
        return (float(vals.mean()) if how == "mean" else float(vals.max())) if vals.size else math.nan
    return value


def _summary(key: str):
    """A per-run value read from the run's summary (for summary keys stats.SUMMARY_METRICS lacks)."""
    return lambda run: as_float((run.get("summary") or {}).get(key))


def _dropped(run: Mapping[str, Any]) -> float:
    """Samples dropped as too stale: the summary's count, else the last step's (sync drops none)."""
    value = as_float((run.get("summary") or {}).get("dropped_samples_total"))
    value = value if math.isfinite(value) else _last(run, "dropped_samples_total")
    return value if math.isfinite(value) else 0.0


def _lost(run: Mapping[str, Any]) -> float:
    value = _last(run, "lost_units_total")
    return value if math.isfinite(value) else 0.0


# metric → per-run value; aggregated across seeds like the summary metrics (stats.seed_stat)
RUN_METRICS = {
    "episodes_per_s": _episodes_per_s,
    "wait_time_per_step_s": _summary("wait_time_per_step_s"),
    "staleness_oldest_mean": _step_stat("staleness_seq_mean", "mean"),
    "staleness_oldest_max": _step_stat("staleness_seq_max", "max"),
    "multi_version_seq_frac": _step_stat("multi_version_seq_frac", "mean"),
    "dropped_samples": _dropped,
    "lost_units": _lost,
    "generator_util": _step_stat("generator_util", "mean"),
    "turns_mean": _per_episode("episode/turns_mean"),
    "turns_max": _step_stat("episode/turns_max", "max"),
    "len_p90": _step_stat("episode/len_p90", "mean"),
    "end_max_turns": _per_episode("episode/end_max_turns", absent=0.0),
}


def add_run_metrics(methods: dict, groups: Mapping[str, list]) -> None:
    """Put RUN_METRICS into each method's aggregate, in place (mean and t interval over seeds)."""
    for method, runs in groups.items():
        for key, fn in RUN_METRICS.items():
            methods.setdefault(method, {})[key] = seed_stat([fn(run) for run in runs])


def token_staleness_shares(runs: Sequence[Mapping[str, Any]]) -> list[np.ndarray]:
    """Per run, the share of its trained tokens at each lag 0, 1, 2, ... (from ``staleness_token_hist``
    summed over steps); runs without the histogram are left out."""
    out = []
    for run in runs:
        hists = [r["staleness_token_hist"] for r in _steps(run) if isinstance(r.get("staleness_token_hist"), list)]
        if not hists:
            continue
        total = np.zeros(max(len(h) for h in hists))
        for h in hists:
            total[:len(h)] += np.asarray(h, float)
        if total.sum() > 0:
            out.append(total / total.sum())
    return out


# ---- the report ------------------------------------------------------------------------------

def _k_of(method: str) -> int | None:
    match = re.fullmatch(r"async-\w+-k(\d+)", method)
    return int(match.group(1)) if match else None


def arm_summary(methods: Mapping[str, Any], groups: Mapping[str, list], ideal: float | None) -> dict:
    """Per async arm: K, throughput ratios against sync, share of the ideal, staleness, drops and the
    eval gap against sync (compare_arms, Holm-adjusted over the arms' gaps together)."""
    out = {}
    for method in methods:
        if method == SYNC or _k_of(method) is None:
            continue
        speed = ratio(mean(methods, method, "samples_per_s"), mean(methods, SYNC, "samples_per_s"))
        out[method] = {
            "K": _k_of(method),
            "samples_per_s_ratio": speed,
            "episodes_per_s_ratio": mratio(methods, method, SYNC, "episodes_per_s"),
            "time_per_step_ratio": mratio(methods, method, SYNC, "time_per_step_s"),
            "share_of_ideal": None if speed is None or ideal is None else ratio(speed, ideal),
            "staleness_oldest_mean": _finite(mean(methods, method, "staleness_oldest_mean")),
            "staleness_oldest_max": _finite(_max_over_runs(groups.get(method, []))),
            "dropped_samples": _finite(mean(methods, method, "dropped_samples")),
            "eval_gap_vs_sync": final_reward_gap(groups, method, SYNC, EQUIVALENCE_MARGIN)}
    verdicts_within([row["eval_gap_vs_sync"] for row in out.values() if row["eval_gap_vs_sync"]])
    return out


def _max_over_runs(runs: list) -> float:
    values = finite(RUN_METRICS["staleness_oldest_max"](r) for r in runs)
    return float(values.max()) if values.size else math.nan


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _staleness_figure(fig_dir: Path, groups: Mapping[str, list], colors: dict) -> FigureList:
    """Histogram of token staleness per async arm: grouped bars = mean share over seeds at each lag,
    whiskers = min/max over seeds."""
    arms = {m: _padded(token_staleness_shares(runs)) for m, runs in groups.items() if m != SYNC}
    arms = {m: np.array(s) for m, s in arms.items() if s}
    width = max((s.shape[1] for s in arms.values()), default=0)
    fig = F.new_figure()
    try:
        ax = fig.subplots()
        bar = 0.8 / max(len(arms), 1)
        for i, (method, table) in enumerate(arms.items()):
            table = np.pad(table, ((0, 0), (0, width - table.shape[1])))
            x, mid = np.arange(width) + (i - (len(arms) - 1) / 2) * bar, table.mean(axis=0)
            ax.bar(x, mid, bar, color=colors.get(method), label=method,
                   yerr=np.vstack([mid - table.min(axis=0), table.max(axis=0) - mid]), capsize=2)
        if arms:
            ax.legend(fontsize=8, frameon=False)
        else:  # only sync ran (or no run logged the histogram): an empty panel says so
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
        ax.set_xticks(range(width))
        ax.set_xlabel("versions behind the trainer")
        ax.set_ylabel("share of trained tokens")
        ax.set_title("Token staleness at consumption", fontsize=11)
        ax.grid(axis="y", alpha=0.3)
        _write_png(fig_dir / "fig2_token_staleness.png", F.png_bytes(fig))
    finally:
        fig.clear()
    return [("fig2_token_staleness.png", "Histogram of token staleness (the trainer's version minus the token's) "
             "over all training steps, per async arm: bar = mean share over seeds, whiskers = min/max over seeds.")]


def _write_png(path: Path, data: bytes) -> None:
    """Atomic (tmp + rename): a crashed report leaves no truncated PNG."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def build_agent(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, FigureList]:
    """Agent suite: throughput against sync and the ideal overlap, staleness, drops, turns, eval gap.

    Takes results.json, the figure folder and the aggregated per-method stats (to which it adds
    RUN_METRICS); returns (summary entries, Markdown table, [(figure file, caption)])."""
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER)
    add_run_metrics(methods, groups)
    t_gen, t_train = mean(methods, SYNC, "gen_time_per_step_s"), mean(methods, SYNC, "train_time_per_step_s")
    ideal = ideal_overlap(t_gen, t_train)
    arms = arm_summary(methods, groups, ideal)
    extra = {"ideal_overlap": ideal, "sync_gen_time_per_step_s": _finite(t_gen),
             "sync_train_time_per_step_s": _finite(t_train), "arms": arms,
             "token_staleness_share": {m: np.mean(s, axis=0).tolist() for m, runs in groups.items()
                                       if (s := _padded(token_staleness_shares(runs)))}}
    colors = F.method_colors(list(groups))
    F.method_bar_chart(fig_dir / "fig1_samples_per_s.png", methods, "samples_per_s", title="Throughput",
                       ylabel="samples per second of training", colors=colors,
                       points=seed_points(groups, methods, "samples_per_s"))
    figs = [("fig1_samples_per_s.png", "Samples trained per second of the training loop; error bars = 95% t "
             "interval over seeds, dots = seeds.")]
    figs += _staleness_figure(fig_dir, groups, colors)
    figs += line_figures(fig_dir, groups, AGENT_LINES, colors)
    return extra, _tables(methods, groups, arms, ideal), figs


def _padded(shares: list[np.ndarray]) -> list[np.ndarray]:
    width = max((len(s) for s in shares), default=0)
    return [np.pad(s, (0, width - len(s))) for s in shares]


def _tables(methods: Mapping[str, Any], groups: Mapping[str, list], arms: Mapping[str, dict],
            ideal: float | None) -> str:
    speed = [("samples_per_s", "Samples/s"), ("episodes_per_s", "Episodes/s"), ("time_per_step_s", "Time/step (s)"),
             ("gen_time_per_step_s", "Gen/step (s)"), ("train_time_per_step_s", "Train/step (s)"),
             ("wait_time_per_step_s", "Trainer wait/step (s)"), ("generator_util", "Generator busy (%)", 100)]
    table = method_table(methods, groups, speed, CI_CAPTION + " Gen/step: generation seconds per step (async: "
                         "the workers' busy seconds); trainer wait: the pacing the buffer imposes.")
    rows = [[m, str(row["K"]), W.ratio(row["samples_per_s_ratio"]), W.ratio(row["episodes_per_s_ratio"]),
             W.ratio(ideal), _percent(row["share_of_ideal"])] for m, row in arms.items()]
    table += "\n" + W.md_table(["Arm", "K = W", "Samples/s ÷ sync", "Episodes/s ÷ sync", "Ideal overlap",
                                "Share of ideal"], rows)
    table += ("\nIdeal overlap = (T_gen + T_train) / max(T_gen, T_train) from sync's mean generation and "
              "training time per step: the most any overlap of the two can gain. Ratios of means over seeds.\n")
    episodes = [("staleness_oldest_mean", "Oldest-token staleness (mean)"),
                ("staleness_oldest_max", "… max"), ("multi_version_seq_frac", "Multi-version episodes (%)", 100),
                ("dropped_samples", "Dropped samples"), ("lost_units", "Lost units"),
                ("turns_mean", "Turns/episode"), ("turns_max", "Longest (turns)"), ("len_p90", "Length p90 (tokens)"),
                ("end_max_turns", "Hit max_turns (%)", 100), ("final_eval_reward", "Final eval reward")]
    table += "\n" + method_table(methods, groups, episodes, "Per run: staleness of each episode's oldest "
                                 "token, mean over steps and largest; dropped = too stale at consumption; turns "
                                 "weighted by the episodes of each step. " + CI_CAPTION)
    gaps = [(f"{m} − sync", row["eval_gap_vs_sync"]) for m, row in arms.items() if row["eval_gap_vs_sync"]]
    if gaps:
        table += "\n" + W.comparison_table(gaps, scale=1.0)
    return table


def _percent(x: float | None) -> str:
    return "n/a" if x is None else f"{W.number(100 * x)}%"
