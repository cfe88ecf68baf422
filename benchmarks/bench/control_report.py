"""Report of ``python -m benchmarks control``: summary.json, table.md, figures/*.png, report.html.

Scores: a run's final score (mean raw return of its last 10 % of iterations) is normalised per env
between fixed reference scores, ``(score − random) / (expert − random)`` (:data:`REFERENCE_SCORES`),
so a study's numbers do not move with its own best or worst run; an env without references is
min-max normalised over every run of that env in the results.
Per arm × buffer capacity the runs of all envs and seeds are pooled into an IQM with a stratified
(per-env) bootstrap 95 % CI, the same for the area under the normalised-return curve (AUC: mean
normalised return over training), plus performance profiles and IQM-over-training curves.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench import figures as F
from benchmarks.bench import wording as W
from benchmarks.bench.control_stats import N_BOOT, iqm, iqm_ci, min_max_normalise, normalised_curve, performance_profile
from benchmarks.bench.report import _jsonable, _render_html, _write_atomic

ARM_ORDER = ("ppo", "ppo_kl", "spo", "impala", "vaco")
CURVE_POINTS = 21
TAUS = np.linspace(0.0, 1.0, 41)


def _arms(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    present = {r["params"]["arm"] for r in runs}
    return [a for a in ARM_ORDER if a in present] + sorted(present - set(ARM_ORDER))


# (random, expert) returns per MuJoCo env family: the reference scores D4RL publishes for its v2
# envs (a uniform-random policy and a SAC expert). Gymnasium's v5 envs keep v2's reward terms,
# weights and 1,000-step episodes for these four (v5 changes defaults of options and a few edge
# cases, not the reward's scale), so the v2 references are used for v5 as they are.
REFERENCE_SCORES: dict[str, tuple[float, float]] = {
    "hopper": (-20.272305, 3234.3), "halfcheetah": (-280.178953, 12135.0),
    "walker2d": (1.629008, 4592.3), "ant": (-325.6, 3879.7),
}


def reference_range(env: str) -> tuple[float, float] | None:
    """(random, expert) of ``env`` ("Hopper-v5" -> the hopper references), None if it has none."""
    return REFERENCE_SCORES.get(env.split("-")[0].lower())


def _env_ranges(runs: Sequence[Mapping[str, Any]]) -> dict[str, tuple[float, float]]:
    """{env: (low, high)}: the reference scores, else the min and max final score over its runs."""
    scores: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        if run["summary"].get("final_score") is not None:
            scores[run["params"]["env"]].append(run["summary"]["final_score"])
    return {env: reference_range(env) or (min(v), max(v)) for env, v in scores.items()}


def scored_runs(runs: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Per run: env, arm, capacity, seed, raw and normalised final score, normalised curve, AUC."""
    ranges = _env_ranges(runs)
    out = []
    for run in runs:
        env, score = run["params"]["env"], run["summary"].get("final_score")
        low, high = ranges.get(env, (0.0, 0.0))
        curve = normalised_curve([m.get("episodic_return") for m in run["metrics"]], low, high, CURVE_POINTS)
        out.append({"env": env, "arm": run["params"]["arm"], "capacity": run["params"]["capacity"],
                    "seed": run["seed"], "final_score": score,
                    "normalised": np.nan if score is None else min_max_normalise(score, low, high),
                    "curve": curve, "auc": float(np.trapezoid(curve, dx=1.0 / (CURVE_POINTS - 1)))})
    return out


def _strata(rows: Sequence[dict], key: str) -> list[np.ndarray]:
    by_env: dict[str, list] = defaultdict(list)
    for row in rows:
        by_env[row["env"]].append(row[key])
    return [np.asarray(v, dtype=float) for _, v in sorted(by_env.items())]


def aggregate(rows: Sequence[dict], arms: Sequence[str], capacities: Sequence[int]) -> dict:
    """{arm: {capacity: {iqm_final: (point, lo, hi), iqm_auc: ..., n}}}."""
    out: dict = {}
    for arm in arms:
        out[arm] = {}
        for cap in capacities:
            cell = [r for r in rows if r["arm"] == arm and r["capacity"] == cap]
            out[arm][cap] = {"iqm_final": iqm_ci(_strata(cell, "normalised")),
                             "iqm_auc": iqm_ci(_strata(cell, "auc")), "n": len(cell)}
    return out


def _ci(stat: Sequence[float]) -> str:
    point, low, high = stat
    return "n/a" if not np.isfinite(point) else f"{point:.3f} [{low:.3f}, {high:.3f}]"


def _tables(agg: dict, rows: Sequence[dict], arms: Sequence[str], capacities: Sequence[int]) -> str:
    head = "| arm | " + " | ".join(f"N = {c}" for c in capacities) + " |\n|---|" + "---|" * len(capacities)
    parts = []
    for key, title in (("iqm_final", "IQM of the normalised final return, (score − random) / (expert − random)"),
                       ("iqm_auc", "IQM of the area under the normalised-return curve")):
        body = "\n".join(f"| {arm} | " + " | ".join(_ci(agg[arm][c][key]) for c in capacities) + " |"
                         for arm in arms)
        parts.append(f"## {title} (95 % stratified bootstrap CI; N = policy buffer capacity)\n\n{head}\n{body}\n")
    envs = sorted({r["env"] for r in rows})
    env_head = "| arm | N | " + " | ".join(envs) + " |\n|---|---|" + "---|" * len(envs)
    lines = []
    for arm in arms:
        for cap in capacities:
            cells = []
            for env in envs:
                vals = [r["final_score"] for r in rows if (r["arm"], r["capacity"], r["env"]) == (arm, cap, env)
                        and r["final_score"] is not None]
                cells.append(f"{np.mean(vals):.1f} ± {np.std(vals):.1f} (n={len(vals)})" if vals else "n/a")
            lines.append(f"| {arm} | {cap} | " + " | ".join(cells) + " |")
    parts.append("## Raw final return per env (mean ± std over seeds)\n\n" + env_head + "\n" + "\n".join(lines) + "\n")
    return "\n".join(parts)


def _figures(fig_dir: Path, agg: dict, rows: Sequence[dict], arms: Sequence[str],
             capacities: Sequence[int]) -> list[tuple[str, str]]:
    colors = F.method_colors(list(arms))
    caps = np.asarray(capacities, dtype=float)
    figs = []
    for name, key, label in (("fig1_iqm_final.png", "iqm_final", "IQM normalised final return"),
                             ("fig2_iqm_auc.png", "iqm_auc", "IQM normalised AUC")):
        curves = {arm: tuple([caps] + [np.asarray([agg[arm][c][key][i] for c in capacities]) for i in range(3)])
                  for arm in arms}
        F.line_band_figure(fig_dir / name, {"": curves}, title=f"{label} vs policy buffer capacity",
                           xlabel="policy buffer capacity N", ylabel=label, colors=colors)
        figs.append((name, f"{label} per arm vs buffer capacity; band = 95 % stratified bootstrap CI."))
    profiles, over_training = {}, {}
    x_train = np.linspace(0.0, 1.0, CURVE_POINTS)
    for cap in capacities:
        profiles[f"N = {cap}"], over_training[f"N = {cap}"] = {}, {}
        for arm in arms:
            cell = [r for r in rows if r["arm"] == arm and r["capacity"] == cap]
            profiles[f"N = {cap}"][arm] = (TAUS, *performance_profile(_strata(cell, "normalised"), TAUS))
            over_training[f"N = {cap}"][arm] = _iqm_curve(cell, x_train)
    F.line_band_figure(fig_dir / "fig3_performance_profile.png", profiles, title="Performance profiles",
                       xlabel="normalised score τ", ylabel="fraction of runs > τ", colors=colors)
    figs.append(("fig3_performance_profile.png", "Fraction of runs (all envs, seeds) whose normalised final "
                 "return exceeds τ, one panel per buffer capacity; band = 95 % stratified bootstrap CI."))
    F.line_band_figure(fig_dir / "fig4_iqm_over_training.png", over_training, title="IQM over training",
                       xlabel="fraction of training", ylabel="IQM normalised return", colors=colors)
    figs.append(("fig4_iqm_over_training.png", "IQM of the normalised training return over training, "
                 "one panel per buffer capacity; band = 95 % stratified bootstrap CI."))
    return figs


def _iqm_curve(cell: Sequence[dict], x: np.ndarray) -> tuple:
    by_env: dict[str, list] = defaultdict(list)
    for row in cell:
        by_env[row["env"]].append(row["curve"])
    strata = [np.stack(v) for _, v in sorted(by_env.items())]
    if not strata:
        nan = np.full(len(x), np.nan)
        return x, nan, nan, nan
    # Resample runs (rows) within each env; the statistic is the IQM over runs at every point.
    rng = np.random.default_rng(0)
    pooled = np.concatenate(strata)
    reps = np.concatenate([s[rng.integers(0, len(s), size=(N_BOOT, len(s)))] for s in strata], axis=1)
    low, high = np.percentile(iqm(reps, axis=1), [2.5, 97.5], axis=0)  # reps: [N_BOOT, runs, points]
    return x, np.asarray(iqm(pooled, axis=0)), low, high


def write_control_report(out_dir: Path, results: dict) -> dict:
    """Write summary.json, table.md, figures/*.png and report.html; returns the summary dict.

    The summary's top-level numbers are the headline: per arm, the IQM normalised final return at
    the smallest and largest buffer capacity."""
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = results.get("runs") or []
    rows = scored_runs(runs)
    arms = _arms(runs)
    capacities = sorted({r["capacity"] for r in rows})
    agg = aggregate(rows, arms, capacities)
    notes = W.partial_line(len(runs), results.get("cells_total")) + W.parts_line(results.get("parts"))
    table_md = "".join(f"{line}\n\n" for line in notes) + _tables(agg, rows, arms, capacities)
    figures = _figures(fig_dir, agg, rows, arms, capacities) if rows else []
    headline = {f"{arm}_iqm_N{cap}": agg[arm][cap]["iqm_final"][0] for arm in arms
                for cap in {capacities[0], capacities[-1]}} if capacities else {}
    summary = _jsonable({"suite": "control", "quick": bool(results.get("quick", False)),
                         "command": results.get("command"), "created_at": results.get("created_at"),
                         "host": results.get("host"), "n_runs": len(runs),
                         "cells_total": results.get("cells_total", len(runs)),
                         "env_ranges": {env: list(r) for env, r in sorted(_env_ranges(runs).items())},
                         "aggregate": {arm: {str(c): v for c, v in caps.items()} for arm, caps in agg.items()},
                         **headline})
    _write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    _write_atomic(out_dir / "table.md", f"# asyncrl bench: control\n\n{table_md}")
    _write_atomic(out_dir / "report.html", _render_html(summary, results, table_md, figures, fig_dir))
    return summary
