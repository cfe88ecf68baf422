"""The a3po suite's report: speed-ups against sync and recompute, the ideal overlap, the eval gap,
the paper-style figures, and with ``--ks`` A-3PO against recompute and sync at each look-ahead
W = K with the approximation's error by token staleness."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from . import figures as F
from . import wording as W
from .speed_report import paired_headline, speed_section
from .report import CI_CAPTION, FigureList, line_figures, mean, method_table, mratio, points_gap, ratio, seed_points
from .stats import as_float as _num
from .stats import final_reward_gap, group_by_method, verdicts_within, wall_time_key

METHOD_ORDER = ("sync", "async-recompute", "async-loglinear", "async-a3po-floor")
EQUIVALENCE_MARGIN = 0.03  # TOST margin in eval reward: "equivalent" means within 3 points

# a3po line figures, after the A-3PO paper: (file, {panel title: metric}, x axis, title, y label(s), caption).
A3PO_LINES = (
    ("fig2_reward_vs_wall.png", {"": "reward_mean"}, wall_time_key, "Train reward vs training wall time",
     "train reward", "Train reward vs cumulative step time (x excludes eval time)"),
    ("fig3_eval_reward.png", {"": "eval_reward"}, "step", "Eval reward vs step", "eval reward",
     "Eval reward vs step"),
    ("fig4_entropy.png", {"": "entropy"}, "step", "Entropy vs step", "entropy", "Policy entropy vs step"),
    ("fig5_importance_weights.png", {"max": "importance_weight_max", "min": "importance_weight_min"}, "step",
     "Importance weight extremes per step", ["max importance weight", "min importance weight"],
     "Max and min importance weight per step"),
    ("fig6_clipped_tokens.png", {"": "clipped_tokens"}, "step", "Clipped-token fraction vs step",
     "clipped-token fraction", "Fraction of clipped tokens per step"),
)


def build_a3po(results: Mapping[str, Any], fig_dir: Path, methods: dict
               ) -> tuple[dict, str, FigureList]:
    """A-3PO suite: speedups vs sync/recompute, overlap ceiling, eval gap, paper-style figures.

    Takes results.json, the figure folder and the aggregated per-method stats; returns
    (suite-specific summary entries, Markdown table, [(figure file, caption)])."""
    sync, rec, ll = "sync", "async-recompute", "async-loglinear"
    t_gen = mean(methods, sync, "gen_time_per_step_s")
    t_train = mean(methods, sync, "train_time_per_step_s")
    # Perfect generation/training overlap makes a step cost max(T_gen, T_train) instead of the sum.
    ideal = ratio(t_gen + t_train, max(t_gen, t_train))
    speedup = mratio(methods, sync, ll, "train_wall_s")
    extra = {
        "speedup_vs_sync": speedup,
        "speedup_vs_recompute": mratio(methods, rec, ll, "train_wall_s"),
        "prox_time_ratio": mratio(methods, rec, ll, "prox_time_per_step_s"),
        "ideal_overlap": ideal,
        "speedup_fraction_of_ideal": None if speedup is None or ideal is None else ratio(speedup, ideal),
        "eval_gap_sync_minus_loglinear": points_gap(methods, sync, ll, "final_eval_reward"),
        # trainer publish + worker pull, per step, of the A-3PO runs (the weight channel's cost)
        "weight_sync_s_per_step": _weight_sync(methods, ll),
        "decode_tokens_per_s": {m: _finite(mean(methods, m, "gen_tokens_per_s")) for m in methods},
        "device": _devices(results),
        "per_method": {m: {"final_eval_reward_mean": s["final_eval_reward"]["mean"],
                           "final_eval_reward_ci": [s["final_eval_reward"]["ci_low"],
                                                    s["final_eval_reward"]["ci_high"]]}
                       for m, s in methods.items()},
    }
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER)
    colors = F.method_colors(list(groups))
    F.method_bar_chart(fig_dir / "fig1_prox_time.png", methods, "prox_time_per_step_s", logy=True,
                       title="Proximal-policy time per step", ylabel="seconds (log scale)", colors=colors,
                       points=seed_points(groups, methods, "prox_time_per_step_s"))
    figs = [("fig1_prox_time.png", "Proximal-policy computation time per step (log scale), "
                                   "error bars = 95% t interval over seeds, dots = seeds.")]
    figs += line_figures(fig_dir, groups, A3PO_LINES, colors)
    cols = [("final_eval_reward", "Final eval reward"), ("train_wall_s", "Train wall (s)"),
            ("time_per_step_s", "Time/step (s)"), ("prox_time_per_step_s", "Prox time/step (ms)", 1e3),
            ("importance_weight_max", "IW max"), ("importance_weight_min", "IW min"),
            ("clipped_tokens", "Clipped tokens (%)", 100), ("entropy", "Entropy"), ("ess_frac", "ESS (%)", 100)]
    table = method_table(methods, groups, cols,
                          CI_CAPTION + " IW/clipped/entropy/ESS are per-run means over steps.")
    stale = _stale_summary(methods, groups)
    if stale:  # the --ks variant: A-3PO against recompute at each look-ahead W = K
        extra["by_k"] = stale
        stale_cols = [("staleness_token_mean", "Realized staleness"),
                      ("prox_abs_err_mean", "|ℓ_prox − ℓ_approx| mean"), ("prox_abs_err_max", "… max")]
        table += "\n" + method_table(methods, groups, stale_cols, "Per-run means over steps (the max column: "
                                       "the mean over steps of each step's largest token error).")
        table += "\n" + W.comparison_table(
            [(f"K = {k}: {name}", row[key]) for k, row in stale.items()
             for key, name in (("eval_gap_loglinear_minus_recompute", "A-3PO − recompute"),
                               ("eval_gap_loglinear_minus_sync", "A-3PO − sync"),
                               ("eval_gap_floor_minus_loglinear", "A-3PO floor − A-3PO"),
                               ("eval_gap_floor_minus_sync", "A-3PO floor − sync")) if row[key]], scale=1.0)
        F.line_band_figure(fig_dir / "fig7_prox_error_vs_staleness.png", {"": _error_curves(groups)},
                           title="A-3PO's proximal log-prob error vs staleness", xlabel="token staleness "
                           "(versions behind)", ylabel="mean |ℓ_prox − ℓ_approx| per token", colors=colors)
        figs.append(("fig7_prox_error_vs_staleness.png", "Mean absolute error of the log-linear proximal "
                     "log-probs against the recomputed ones, by how many versions behind each token is (mean "
                     "over the measured steps); line = mean over seeds, band = min/max over seeds."))
    speed, speed_md = speed_section(results.get("timed_runs") or results.get("runs") or [],
                                    _speed_comparisons(methods), _overlap_ideal, IDEAL_WORDS)
    if speed:
        extra["speed"] = speed
        table += "\n" + speed_md
        if "timed_runs" in results:  # --repeats: the headline ratios over every repeat, not repeat 1
            _paired_headline(extra, speed, ll, rec)
    return extra, table, figs


IDEAL_WORDS = ("the a3po suite's ideal is perfect overlap of generation and training, (T_gen + T_train) / "
               "max(T_gen, T_train) per step of each pair's sync run, and applies to the ratios against sync")


def _overlap_ideal(sync_run: Mapping[str, Any]) -> float | None:
    """The speed-up over this sync run that perfectly overlapped phases would give (None if unlogged)."""
    gen, train = (_num((sync_run.get("summary") or {}).get(k)) for k in ("gen_time_per_step_s",
                                                                          "train_time_per_step_s"))
    return ratio(gen + train, max(gen, train)) if gen > 0 and train > 0 else None


def _paired_headline(extra: dict, speed: Mapping[str, Any], ll: str, rec: str) -> None:
    """speedup_vs_sync / _vs_recompute (and per K with --ks) as paired geometric means over the repeats."""
    paired_headline(extra, speed, {"speedup_vs_sync": (f"{ll} vs sync", "train_wall_s"),
                                   "speedup_vs_recompute": (f"{ll} vs {rec}", "train_wall_s")})
    if extra.get("speedup_vs_sync") is not None and extra.get("ideal_overlap") is not None:
        extra["speedup_fraction_of_ideal"] = extra["speedup_vs_sync"] / extra["ideal_overlap"]
    for k, row in (extra.get("by_k") or {}).items():
        paired_headline(row, speed, {"speedup_vs_sync": (f"{ll}-k{k} vs sync", "train_wall_s"),
                                     "speedup_vs_recompute": (f"{ll}-k{k} vs {rec}-k{k}", "train_wall_s")})


def _speed_comparisons(methods: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every arm against sync, then A-3PO against recompute at the same look-ahead."""
    pairs = [(m, "sync") for m in methods if m != "sync"]
    return pairs + [(m, m.replace("async-loglinear", "async-recompute")) for m in methods
                    if m.startswith("async-loglinear")]


def _stale_summary(methods: Mapping[str, Any], groups: Mapping[str, list]) -> dict:
    """Per K of the a3po ``--ks`` variant (methods async-<prox>-k<K>): A-3PO against recompute and
    sync (reward gaps in points with the Welch interval, Holm-adjusted p over every gap of the table, TOST
    within EQUIVALENCE_MARGIN, MDE and verdict: compare_arms), speed-ups, and how far
    its proximal log-probs are from the exact ones (mean over measured tokens, and at the stalest
    token bin measured)."""
    out = {}
    curves = _error_curves(groups)
    for m in methods:
        match = re.fullmatch(r"async-loglinear-k(\d+)", m)
        if not match:
            continue
        rec, floor = f"async-recompute-k{match.group(1)}", f"async-a3po-floor-k{match.group(1)}"
        xs, errs = curves.get(m, ((), ()))[:2]
        out[match.group(1)] = {
            "realized_staleness": _finite(mean(methods, m, "staleness_token_mean")),
            "prox_abs_err_mean": _finite(mean(methods, m, "prox_abs_err_mean")),
            "prox_abs_err_mean_stale_steps": _stale_steps_error(groups.get(m, [])),
            "prox_abs_err_at_max_staleness": _finite(float(errs[-1])) if len(xs) else None,
            "max_measured_staleness": int(xs[-1]) if len(xs) else None,
            "eval_gap_loglinear_minus_recompute": final_reward_gap(groups, m, rec, EQUIVALENCE_MARGIN),
            "eval_gap_loglinear_minus_sync": final_reward_gap(groups, m, "sync", EQUIVALENCE_MARGIN),
            # A-3PO with its α floored, where run (--methods async-a3po-floor): against A-3PO and sync
            "eval_gap_floor_minus_loglinear": final_reward_gap(groups, floor, m, EQUIVALENCE_MARGIN),
            "eval_gap_floor_minus_sync": final_reward_gap(groups, floor, "sync", EQUIVALENCE_MARGIN),
            "speedup_vs_recompute": mratio(methods, rec, m, "train_wall_s"),
            "speedup_vs_sync": mratio(methods, "sync", m, "train_wall_s")}
    verdicts_within([g for row in out.values() for key in ("eval_gap_loglinear_minus_recompute",
                                                           "eval_gap_loglinear_minus_sync", "eval_gap_floor_minus_loglinear",
                                                           "eval_gap_floor_minus_sync") if (g := row[key])])
    return out


def _stale_steps_error(runs: list) -> float | None:
    """Mean over runs of each run's mean ``prox_abs_err_mean`` over the steps with stale tokens
    (``staleness_token_mean`` > 0): a step trained on fresh data only has an error of exactly 0,
    which the plain mean over steps averages in."""
    per_run = []
    for run in runs:
        errs = [_num(rec.get("prox_abs_err_mean")) for rec in run.get("metrics") or []
                if _num(rec.get("staleness_token_mean", math.nan)) > 0]
        errs = [e for e in errs if math.isfinite(e)]
        if errs:
            per_run.append(float(np.mean(errs)))
    return float(np.mean(per_run)) if per_run else None


_STALE_ERR = "prox_abs_err_stale"  # + s: the step's mean error over tokens s versions behind


def _error_curves(groups: Mapping[str, list]) -> dict:
    """{method: (staleness bins, mean error, min, max)} over the runs that logged prox_abs_err_mean."""
    curves = {}
    for method, runs in groups.items():
        per_run = []
        for run in runs:
            bins: dict[int, list[float]] = {}
            for rec in run.get("metrics") or []:
                per_token = {int(k[len(_STALE_ERR):]): _num(v) for k, v in rec.items() if k.startswith(_STALE_ERR)}
                if not per_token:  # older runs: the step's mean error at its mean staleness
                    per_token = {round(_num(rec.get("staleness_token_mean", math.nan))):
                                 _num(rec.get("prox_abs_err_mean"))} \
                        if math.isfinite(_num(rec.get("staleness_token_mean"))) else {}
                for stale, err in per_token.items():
                    if math.isfinite(err):
                        bins.setdefault(stale, []).append(err)
            if bins:
                per_run.append({b: float(np.mean(v)) for b, v in bins.items()})
        if not per_run:
            continue
        xs = sorted({b for r in per_run for b in r})
        cols = [[r[b] for r in per_run if b in r] for b in xs]
        curves[method] = (np.array(xs, float), np.array([np.mean(c) for c in cols]),
                          np.array([min(c) for c in cols]), np.array([max(c) for c in cols]))
    return curves


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _weight_sync(methods: dict, method: str) -> float | None:
    total = sum(mean(methods, method, key) for key in ("weight_publish_per_step_s", "weight_pull_per_step_s"))
    return total if math.isfinite(total) else None


def _devices(results: Mapping[str, Any]) -> str | None:
    """The device(s) the runs trained on, from their summaries ("cpu", or the GPU's name)."""
    names = sorted({(r.get("summary") or {}).get("device") for r in results.get("runs") or []} - {None})
    return ", ".join(names) or None
