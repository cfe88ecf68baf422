"""Turn a bench `results.json` into summary.json, table.md, figures/*.png and report.html.

`write_report` is the single entry point. It aggregates every method's runs across seeds
(mean + 95% percentile-bootstrap CI), then dispatches on `results["suite"]` to one builder per
suite; a builder returns its suite-specific headline numbers, a Markdown table and the figures
it drew. The HTML report is self-contained (PNGs inlined as base64 data URIs) so it can be
mailed or attached to a PR as one file.

Missing data is the norm (a sync run logs no staleness, a crashed seed has no final eval), so
every lookup degrades to NaN, NaN is dropped by the statistics, and NaN is written to JSON as
null; ratios whose inputs are missing are null.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import figures as F
from . import wording as W
from .atlas_report import COLLAPSE_MARGIN, build_atlas
from .stats import aggregate_methods, diff_ci, group_by_method, run_value, wall_time_key
from .stats import as_float as _num

__all__ = ["COLLAPSE_MARGIN", "md_to_html", "write_report"]

# Display order of the methods each suite is expected to contain; unknown methods go last.
METHOD_ORDER = {"a3po": ("sync", "async-recompute", "async-loglinear"),
                "peer-trl": ("trl-grpo", "asyncrl-sync", "asyncrl-async-loglinear")}
CI_CAPTION = ("Cells: mean ± half-width of the 95% percentile-bootstrap CI of the mean over "
              "seeds (n = number of seeds); n/a = not logged.")

FigureList = list[tuple[str, str]]  # (file name under figures/, caption)
Builder = Callable[[Mapping[str, Any], Path, dict], tuple[dict, str, FigureList]]


def _mean(methods: Mapping[str, Any], method: str, metric: str) -> float:
    """Cross-seed mean of `metric` for `method`, NaN when the method or metric is absent."""
    return _num(methods.get(method, {}).get(metric, {}).get("mean"))


def _ratio(num: float, den: float) -> float | None:
    """num / den, or None when either is missing/non-finite or den is zero."""
    if not (math.isfinite(num) and math.isfinite(den)) or den == 0:
        return None
    return num / den


def _pm(stat: Mapping[str, Any], scale: float = 1.0) -> str:
    """Table cell "mean ± half-width" for a {"mean", "ci_low", "ci_high"} stat, times ``scale``
    (e.g. 1e3 to show seconds as milliseconds), fixed-point at the mean's precision."""
    mean, low, high = (_num(stat.get(k)) * scale for k in ("mean", "ci_low", "ci_high"))
    return W.mean_pm(mean, (high - low) / 2)


def _seed_points(groups: Mapping[str, list], methods: Mapping[str, Any], metric: str) -> list[list[float]]:
    """Each method's per-seed values of ``metric`` (drawn as dots over its CI bar)."""
    return [[run_value(r, metric) for r in groups.get(m, [])] for m in methods]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> str:
    """A GitHub-style Markdown table followed by a caption paragraph."""
    return W.md_table(header, rows) + "\n" + caption + "\n"


BAND = "mean over seeds, band = 95% bootstrap CI (min/max where only one seed has the step)"
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


def _line_figures(fig_dir: Path, groups: Mapping[str, list], specs: Sequence[tuple], colors: dict
                  ) -> FigureList:
    """Draw one mean-over-seeds line figure per spec (see A3PO_LINES); returns [(file, caption)]."""
    for name, panels, x, title, ylabel, _ in specs:
        F.method_line_figure(fig_dir / name, groups, panels, x=x, title=title, ylabel=ylabel, colors=colors)
    return [(name, f"{caption}; {BAND}.") for name, *_, caption in specs]


def _mratio(methods: Mapping[str, Any], num: str, den: str, metric: str) -> float | None:
    """Ratio of two methods' cross-seed means of `metric` (None if either is missing)."""
    return _ratio(_mean(methods, num, metric), _mean(methods, den, metric))


def _points_gap(methods: Mapping[str, Any], a: str, b: str, metric: str) -> float | None:
    """(mean_a - mean_b) * 100, i.e. a reward difference in points; None if either is missing."""
    gap = _mean(methods, a, metric) - _mean(methods, b, metric)
    return gap * 100 if math.isfinite(gap) else None


def _method_table(methods: Mapping[str, Any], groups: Mapping[str, list],
                  cols: Sequence[tuple[str, str]], caption: str) -> str:
    """One row per method: name, seed count, then `mean ± half-width` per (metric, header[, scale])
    column."""
    rows = [[m, str(len(groups.get(m, [])))] + [_pm(s[c[0]], *c[2:]) for c in cols]
            for m, s in methods.items()]
    return _md_table(["Method", "n"] + [c[1] for c in cols], rows, caption)


def _build_a3po(results: Mapping[str, Any], fig_dir: Path, methods: dict
                ) -> tuple[dict, str, FigureList]:
    """A-3PO suite: speedups vs sync/recompute, overlap ceiling, eval gap, paper-style figures.

    Takes results.json, the figure folder and the aggregated per-method stats; returns
    (suite-specific summary entries, Markdown table, [(figure file, caption)])."""
    sync, rec, ll = "sync", "async-recompute", "async-loglinear"
    t_gen = _mean(methods, sync, "gen_time_per_step_s")
    t_train = _mean(methods, sync, "train_time_per_step_s")
    # Perfect generation/training overlap makes a step cost max(T_gen, T_train) instead of the sum.
    ideal = _ratio(t_gen + t_train, max(t_gen, t_train))
    speedup = _mratio(methods, sync, ll, "train_wall_s")
    extra = {
        "speedup_vs_sync": speedup,
        "speedup_vs_recompute": _mratio(methods, rec, ll, "train_wall_s"),
        "prox_time_ratio": _mratio(methods, rec, ll, "prox_time_per_step_s"),
        "ideal_overlap": ideal,
        "speedup_fraction_of_ideal": None if speedup is None or ideal is None else _ratio(speedup, ideal),
        "eval_gap_sync_minus_loglinear": _points_gap(methods, sync, ll, "final_eval_reward"),
        # trainer publish + worker pull, per step, of the A-3PO runs (the weight channel's cost)
        "weight_sync_s_per_step": _weight_sync(methods, ll),
        "decode_tokens_per_s": {m: _finite(_mean(methods, m, "gen_tokens_per_s")) for m in methods},
        "device": _devices(results),
        "per_method": {m: {"final_eval_reward_mean": s["final_eval_reward"]["mean"],
                           "final_eval_reward_ci": [s["final_eval_reward"]["ci_low"],
                                                    s["final_eval_reward"]["ci_high"]]}
                       for m, s in methods.items()},
    }
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER["a3po"])
    colors = F.method_colors(list(groups))
    F.method_bar_chart(fig_dir / "fig1_prox_time.png", methods, "prox_time_per_step_s", logy=True,
                       title="Proximal-policy time per step", ylabel="seconds (log scale)", colors=colors,
                       points=_seed_points(groups, methods, "prox_time_per_step_s"))
    figs = [("fig1_prox_time.png", "Proximal-policy computation time per step (log scale), "
                                   "error bars = 95% bootstrap CI over seeds, dots = seeds.")]
    figs += _line_figures(fig_dir, groups, A3PO_LINES, colors)
    cols = [("final_eval_reward", "Final eval reward"), ("train_wall_s", "Train wall (s)"),
            ("time_per_step_s", "Time/step (s)"), ("prox_time_per_step_s", "Prox time/step (ms)", 1e3),
            ("importance_weight_max", "IW max"), ("importance_weight_min", "IW min"),
            ("clipped_tokens", "Clipped tokens (%)", 100), ("entropy", "Entropy"), ("ess_frac", "ESS (%)", 100)]
    table = _method_table(methods, groups, cols,
                          CI_CAPTION + " IW/clipped/entropy/ESS are per-run means over steps.")
    stale = _stale_summary(methods, groups)
    if stale:  # the --ks variant: A-3PO against recompute at each look-ahead W = K
        extra["by_k"] = stale
        stale_cols = [("staleness_token_mean", "Realized staleness"),
                      ("prox_abs_err_mean", "|ℓ_prox − ℓ_approx| mean"), ("prox_abs_err_max", "… max")]
        table += "\n" + _method_table(methods, groups, stale_cols, "Per-run means over steps (the max column: "
                                       "the mean over steps of each step's largest token error).")
        F.line_band_figure(fig_dir / "fig7_prox_error_vs_staleness.png", {"": _error_curves(groups)},
                           title="A-3PO's proximal log-prob error vs staleness", xlabel="token staleness "
                           "(versions behind)", ylabel="mean |ℓ_prox − ℓ_approx| per token", colors=colors)
        figs.append(("fig7_prox_error_vs_staleness.png", "Mean absolute error of the log-linear proximal "
                     "log-probs against the recomputed ones, by how many versions behind each token is (mean "
                     "over the measured steps); line = mean over seeds, band = min/max over seeds."))
    return extra, table, figs


def _stale_summary(methods: Mapping[str, Any], groups: Mapping[str, list]) -> dict:
    """Per K of the a3po ``--ks`` variant (methods async-<prox>-k<K>): A-3PO against recompute and
    sync (reward gaps in points with a bootstrap CI over both arms' seeds), speed-ups, and how far
    its proximal log-probs are from the exact ones (mean over measured tokens, and at the stalest
    token bin measured)."""
    out = {}
    curves = _error_curves(groups)
    for m in methods:
        match = re.fullmatch(r"async-loglinear-k(\d+)", m)
        if not match:
            continue
        rec = f"async-recompute-k{match.group(1)}"
        xs, errs = curves.get(m, ((), ()))[:2]
        out[match.group(1)] = {
            "realized_staleness": _finite(_mean(methods, m, "staleness_token_mean")),
            "prox_abs_err_mean": _finite(_mean(methods, m, "prox_abs_err_mean")),
            "prox_abs_err_at_max_staleness": _finite(float(errs[-1])) if len(xs) else None,
            "max_measured_staleness": int(xs[-1]) if len(xs) else None,
            "eval_gap_loglinear_minus_recompute": _gap_ci(groups, m, rec),
            "eval_gap_loglinear_minus_sync": _gap_ci(groups, m, "sync"),
            "speedup_vs_recompute": _mratio(methods, rec, m, "train_wall_s"),
            "speedup_vs_sync": _mratio(methods, "sync", m, "train_wall_s")}
    return out


def _gap_ci(groups: Mapping[str, list], a: str, b: str) -> dict | None:
    """{mean, ci_low, ci_high} of final eval reward a − b in points over the two arms' seeds."""
    if a not in groups or b not in groups:
        return None
    gap = diff_ci([run_value(r, "final_eval_reward") for r in groups[a]],
                  [run_value(r, "final_eval_reward") for r in groups[b]])
    return None if not math.isfinite(gap[0]) else dict(zip(("mean", "ci_low", "ci_high"), (100 * g for g in gap)))


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
    total = sum(_mean(methods, method, key) for key in ("weight_publish_per_step_s", "weight_pull_per_step_s"))
    return total if math.isfinite(total) else None


def _devices(results: Mapping[str, Any]) -> str | None:
    """The device(s) the runs trained on, from their summaries ("cpu", or the GPU's name)."""
    names = sorted({(r.get("summary") or {}).get("device") for r in results.get("runs") or []} - {None})
    return ", ".join(names) or None


def _build_peer_trl(results: Mapping[str, Any], fig_dir: Path, methods: dict
                    ) -> tuple[dict, str, FigureList]:
    """Peer comparison with TRL GRPO: throughput ratios and eval-reward delta.

    Takes results.json, the figure folder and the per-method stats; returns (summary entries,
    Markdown table, figures)."""
    trl, sync, ll = "trl-grpo", "asyncrl-sync", "asyncrl-async-loglinear"
    keys = ("samples_per_s", "time_per_step_s", "final_eval_reward")
    extra = {
        "samples_per_s_ratio_vs_trl": _mratio(methods, ll, trl, "samples_per_s"),
        "samples_per_s_ratio_sync_vs_trl": _mratio(methods, sync, trl, "samples_per_s"),
        "eval_reward_delta_vs_trl": _points_gap(methods, ll, trl, "final_eval_reward"),
        "per_method": {m: {k: s[k] for k in keys} for m, s in methods.items()},
    }
    groups = group_by_method(results.get("runs") or [], METHOD_ORDER["peer-trl"])
    colors = F.method_colors(list(groups))
    F.method_bar_chart(fig_dir / "fig1_samples_per_s.png", methods, "samples_per_s",
                       title="Training throughput", ylabel="samples / s", colors=colors,
                       points=_seed_points(groups, methods, "samples_per_s"))
    figs = [("fig1_samples_per_s.png", "Samples per second per method, error bars = 95% bootstrap CI over "
                                       "seeds, dots = seeds.")]
    figs += _line_figures(fig_dir, groups, [("fig2_eval_reward.png", {"": "eval_reward"}, "step",
                                             "Eval reward vs step", "eval reward", "Eval reward vs step")], colors)
    cols = [("samples_per_s", "Samples/s"), ("time_per_step_s", "Time/step (s)"),
            ("final_eval_reward", "Final eval reward"), ("train_wall_s", "Train wall (s)")]
    return extra, _method_table(methods, groups, cols, CI_CAPTION), figs


_BUILDERS: dict[str, Builder] = {"a3po": _build_a3po, "atlas": build_atlas, "peer-trl": _build_peer_trl}


def _jsonable(obj: Any) -> Any:
    """Deep copy of `obj` that strict JSON accepts: NaN/inf -> None, numpy -> Python, keys -> str."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _write_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` via `path.tmp` + rename, so readers never see a partial file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def md_to_html(md: str) -> str:
    """Render the Markdown our tables use as HTML: pipe tables, and paragraphs for the rest.

    Takes Markdown text; returns an HTML fragment with all text escaped. A run of lines that
    start with "|" is a table (first row = header, "---" separator rows skipped)."""
    out, table = [], []

    def flush() -> None:
        """Emit the pending table rows (if any) as one <table>."""
        if not table:
            return
        cells = [[html.escape(c.strip()) for c in row.strip().strip("|").split("|")] for row in table]
        head, body = cells[0], cells[1:]
        out.append("<table>\n<thead><tr>" + "".join(f"<th>{c}</th>" for c in head) + "</tr></thead>\n<tbody>\n"
                   + "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>\n" for row in body)
                   + "</tbody>\n</table>")
        table.clear()

    for line in md.splitlines():
        if line.lstrip().startswith("|"):
            if not re.fullmatch(r"\s*\|?[\s:|-]*-[\s:|-]*", line):  # skip |---|---| separators
                table.append(line)
            continue
        flush()
        if line.strip():
            out.append(f"<p>{html.escape(line.strip().lstrip('#').strip())}</p>")
    flush()
    return "\n".join(out)


_CSS = ("body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222}"
        "table{border-collapse:collapse;font-size:0.9em}th,td{border:1px solid #ccc;padding:3px 8px;"
        "text-align:right}th:first-child,td:first-child{text-align:left}th{background:#f3f3f3}"
        "figure{margin:1.5em 0}img{max-width:100%}figcaption{color:#555;font-size:0.9em}"
        "code{background:#f3f3f3;padding:1px 4px}")


def _render_html(summary: Mapping[str, Any], results: Mapping[str, Any], table_md: str,
                 figures: FigureList, fig_dir: Path) -> str:
    """The self-contained report page: header facts, headline numbers, table, inlined figures."""
    esc = html.escape
    host = ", ".join(f"{esc(str(k))}={esc(str(v))}" for k, v in (results.get("host") or {}).items())
    headline = "".join(f"<p><strong>{esc(line)}</strong></p>" if line.startswith("Verdict") else f"<p>{esc(line)}</p>"
                       for line in summary.get("headline") or [])
    headline += "<ul>" + "".join(f"<li>{esc(label)}: {esc(value)}</li>"
                                 for label, value in W.headline_items(summary)) + "</ul>"
    parts = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>asyncrl bench: {esc(summary['suite'])}</title><style>{_CSS}</style></head><body>",
             f"<h1>asyncrl bench — {esc(summary['suite'])}</h1>",
             f"<p>Command: <code>{esc(str(results.get('command', '')))}</code><br>"
             f"Date: {esc(str(results.get('created_at', '')))}<br>Host: {host or 'n/a'}<br>"
             f"Runs: {summary['n_runs']}{' (quick mode)' if results.get('quick') else ''}</p>"]
    if headline:
        parts.append(f"<h2>Headline</h2>{headline}")
    parts += ["<h2>Results</h2>", md_to_html(table_md), "<h2>Figures</h2>"]
    for name, caption in figures:
        data = base64.b64encode((fig_dir / name).read_bytes()).decode("ascii")
        parts.append(f"<figure><img src=\"data:image/png;base64,{data}\" alt=\"{esc(caption)}\">"
                     f"<figcaption>{esc(caption)}</figcaption></figure>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


def write_report(out_dir: Path, results: dict) -> dict:
    """Write summary.json, table.md, figures/*.png and report.html for one bench suite.

    Takes the output directory (created if needed) and the parsed results.json dict. Raises
    ValueError for a suite with no builder. Returns the summary dict exactly as written to
    summary.json (missing numbers are None, as in the JSON): the common keys suite, quick,
    command, created_at, host, n_runs and methods ({method: {metric: {mean, ci_low, ci_high,
    n}}}), plus the suite's headline entries.
    """
    suite = results.get("suite")
    if suite not in _BUILDERS:
        raise ValueError(f"unknown bench suite {suite!r}; expected one of {sorted(_BUILDERS)}")
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = results.get("runs") or []
    methods = aggregate_methods(runs, METHOD_ORDER.get(suite, ()))
    extra, table_md, figures = _BUILDERS[suite](results, fig_dir, methods)
    summary = _jsonable({"suite": suite, "quick": bool(results.get("quick", False)),
                         "command": results.get("command"), "created_at": results.get("created_at"),
                         "host": results.get("host"), "n_runs": len(runs),
                         "cells_total": results.get("cells_total", len(runs)), "methods": methods, **extra})
    summary["headline"] = W.partial_line(len(runs), results.get("cells_total")) + \
        (W.HEADLINES[suite](summary, methods) if suite in W.HEADLINES else [])
    # allow_nan=False: _jsonable already mapped NaN to null; fail loudly if anything slipped by.
    _write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    words = "".join(f"{line}\n\n" for line in summary["headline"])
    _write_atomic(out_dir / "table.md", f"# asyncrl bench: {suite}\n\n{words}{table_md}")
    _write_atomic(out_dir / "report.html", _render_html(summary, results, table_md, figures, fig_dir))
    return summary
