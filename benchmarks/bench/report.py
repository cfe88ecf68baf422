"""Turn a bench `results.json` into summary.json, table.md, figures/*.png and report.html.

`write_report` is the entry point. It aggregates every method's runs across seeds
(mean + 95% Student-t interval), then calls the report builder of the suite named by
`results["suite"]` (its record in :mod:`benchmarks.bench.suites`); a builder returns its
suite-specific headline numbers, a Markdown table and the figures it drew. The helpers below are
what the builders share. The HTML report is self-contained (PNGs inlined as base64 data URIs) so it can be
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
from .speed_report import first_repeats
from .stats import aggregate_methods, run_value
from .stats import as_float as _num

__all__ = ["md_to_html", "write_report"]

CI_CAPTION = ("Cells: mean ± half-width of the 95% Student-t interval of the mean over "
              "seeds (n = number of seeds); n/a = not logged.")

FigureList = list[tuple[str, str]]  # (file name under figures/, caption)
Builder = Callable[[Mapping[str, Any], Path, dict], tuple[dict, str, FigureList]]


def mean(methods: Mapping[str, Any], method: str, metric: str) -> float:
    """Cross-seed mean of `metric` for `method`, NaN when the method or metric is absent."""
    return _num(methods.get(method, {}).get(metric, {}).get("mean"))


def ratio(num: float, den: float) -> float | None:
    """num / den, or None when either is missing/non-finite or den is zero."""
    if not (math.isfinite(num) and math.isfinite(den)) or den == 0:
        return None
    return num / den


def _pm(stat: Mapping[str, Any], scale: float = 1.0) -> str:
    """Table cell "mean ± half-width" for a {"mean", "ci_low", "ci_high"} stat, times ``scale``
    (e.g. 1e3 to show seconds as milliseconds), fixed-point at the mean's precision."""
    mean, low, high = (_num(stat.get(k)) * scale for k in ("mean", "ci_low", "ci_high"))
    return W.mean_pm(mean, (high - low) / 2)


def seed_points(groups: Mapping[str, list], methods: Mapping[str, Any], metric: str) -> list[list[float]]:
    """Each method's per-seed values of ``metric`` (drawn as dots over its CI bar)."""
    return [[run_value(r, metric) for r in groups.get(m, [])] for m in methods]


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], caption: str) -> str:
    """A GitHub-style Markdown table followed by a caption paragraph."""
    return W.md_table(header, rows) + "\n" + caption + "\n"


BAND = "mean over seeds, band = 95% t interval (min/max where only one seed has the step)"


def line_figures(fig_dir: Path, groups: Mapping[str, list], specs: Sequence[tuple], colors: dict
                 ) -> FigureList:
    """Draw one mean-over-seeds line figure per spec (see benchmarks.bench.a3po_report.A3PO_LINES); returns [(file, caption)]."""
    for name, panels, x, title, ylabel, _ in specs:
        F.method_line_figure(fig_dir / name, groups, panels, x=x, title=title, ylabel=ylabel, colors=colors)
    return [(name, f"{caption}; {BAND}.") for name, *_, caption in specs]


def mratio(methods: Mapping[str, Any], num: str, den: str, metric: str) -> float | None:
    """Ratio of two methods' cross-seed means of `metric` (None if either is missing)."""
    return ratio(mean(methods, num, metric), mean(methods, den, metric))


def points_gap(methods: Mapping[str, Any], a: str, b: str, metric: str) -> float | None:
    """(mean_a - mean_b) * 100, i.e. a reward difference in points; None if either is missing."""
    gap = mean(methods, a, metric) - mean(methods, b, metric)
    return gap * 100 if math.isfinite(gap) else None


def method_table(methods: Mapping[str, Any], groups: Mapping[str, list],
                 cols: Sequence[tuple[str, str]], caption: str) -> str:
    """One row per method: name, seed count, then `mean ± half-width` per (metric, header[, scale])
    column."""
    rows = [[m, str(len(groups.get(m, [])))] + [_pm(s[c[0]], *c[2:]) for c in cols]
            for m, s in methods.items()]
    return _md_table(["Method", "n"] + [c[1] for c in cols], rows, caption)


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
    ValueError for an unknown suite. Returns the summary dict exactly as written to
    summary.json (missing numbers are None, as in the JSON): the common keys suite, quick,
    command, created_at, host, n_runs and methods ({method: {metric: {mean, ci_low, ci_high,
    n}}}), plus the suite's headline entries.
    """
    from .suites import get_suite

    record = get_suite(str(results.get("suite")))
    if record.write_report is not None:  # a suite with a writer of its own
        return record.write_report(out_dir, results)
    suite = record.name
    out_dir = Path(out_dir)
    fig_dir = out_dir / "figures"
    fig_dir.mkdir(parents=True, exist_ok=True)
    runs = results.get("runs") or []
    # --repeats re-runs each seed: its reward is no new evidence, so every statistic but the speed
    # table (which reads "timed_runs") takes repeat 1 of each seed, the study without repeats
    first = first_repeats(runs)
    methods = aggregate_methods(first, record.method_order)
    view = results if len(first) == len(runs) else {**results, "runs": first, "timed_runs": runs}
    extra, table_md, figures = record.report(view, fig_dir, methods)
    summary = _jsonable({"suite": suite, "quick": bool(results.get("quick", False)),
                         "command": results.get("command"), "created_at": results.get("created_at"),
                         "host": results.get("host"), "n_runs": len(runs),
                         "cells_total": results.get("cells_total", len(runs)), "methods": methods, **extra})
    summary["headline"] = W.partial_line(len(runs), results.get("cells_total")) + W.parts_line(results.get("parts")) + \
        (record.headline(summary, methods) if record.headline else [])
    # allow_nan=False: _jsonable already mapped NaN to null; fail loudly if anything slipped by.
    _write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    words = "".join(f"{line}\n\n" for line in summary["headline"])
    _write_atomic(out_dir / "table.md", f"# asyncrl bench: {suite}\n\n{words}{table_md}")
    _write_atomic(out_dir / "report.html", _render_html(summary, results, table_md, figures, fig_dir))
    return summary
