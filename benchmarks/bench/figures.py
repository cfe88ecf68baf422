"""Plotting helpers for `python -m benchmarks` reports (matplotlib, Agg, no pyplot).

Figures are built with the object API (`Figure` + `FigureCanvasAgg`) rather than pyplot:
pyplot keeps a global registry of open figures and picks a GUI backend from the environment,
neither of which a headless report writer wants. Each helper creates one figure, saves it and
clears it in a `finally`, so nothing lingers even when drawing fails halfway.

All helpers use a fixed DPI and a modest size (plus a 256-colour palette for line plots) so a
PNG stays under 150 kB, and write the file atomically (tmp + rename) so a crashed report never
leaves a truncated PNG behind.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from asyncrl.core.plotting import DPI, new_figure, png_bytes

from .stats import method_curves, wall_time_key

__all__ = ["DPI", "Curve", "bar_chart", "heatmap", "line_band_figure", "method_bar_chart",
           "method_colors", "method_line_figure", "new_figure", "png_bytes"]

# x, mean, low, high, as returned by stats.mean_curve.
Curve = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
# x, y of one seed's run.
SeedLine = tuple[np.ndarray, np.ndarray]


def method_colors(methods: Sequence[str]) -> dict[str, str]:
    """Map each method name to a tab10 colour, in the given order.

    Takes the ordered method names and returns {method: colour}; report builders pass the
    same order to every figure so a method keeps its colour across the whole report.
    """
    palette = [f"C{i}" for i in range(10)]
    return {m: palette[i % len(palette)] for i, m in enumerate(methods)}


_new_figure = new_figure


def _save(fig: Figure, path: Path, *, palette: bool = False) -> Path:
    """Save `fig` as PNG at `path` atomically (tmp + rename); returns `path`.

    palette=True quantises to 256 colours, for line plots: anti-aliased translucent bands over
    noisy 200-step curves produce tens of thousands of distinct colours and a 300 kB truecolour
    PNG; the palette version (no dithering, so flat areas stay flat) looks the same at ~1/3 of
    the size. Heatmaps keep truecolour, where a palette would band the colour bar."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_bytes(png_bytes(fig, palette=palette))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _no_data(ax) -> None:
    """Write a centred 'no data' note so an empty panel is visibly empty, not broken."""
    ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")


def line_band_figure(path: Path, panels: Mapping[str, Mapping[str, Curve]], *, title: str,
                     xlabel: str, ylabel: str | Sequence[str],
                     colors: Mapping[str, str] | None = None,
                     seed_lines: Mapping[str, Mapping[str, Sequence[SeedLine]]] | None = None) -> Path:
    """Line-with-band plot of per-method mean curves, one subplot per panel.

    Takes the output `path`; `panels` = {panel title: {method: (x, mean, low, high)}} (use a
    single "" key for a one-panel figure); the figure title and axis labels (`ylabel` may give
    one label per panel); optional {method: colour}. Each method is drawn as its mean line with
    a translucent band between low and high (the seed CI or min/max from mean_curve). Methods
    with empty curves are skipped. Optional `seed_lines` = {panel: {method: [(x, y) per seed]}}:
    each seed drawn as a thin line in its method's colour, so a band hides no outlying seed.
    Returns `path`.
    """
    names = list(panels) or [""]
    seed_lines = seed_lines or {}
    colors = dict(colors or {})
    fig = _new_figure(len(names))
    try:
        axes = fig.subplots(1, len(names), squeeze=False)[0]
        ylabels = [ylabel] * len(names) if isinstance(ylabel, str) else list(ylabel)
        for ax, name, yl in zip(axes, names, ylabels, strict=True):
            drawn = 0
            for i, (method, (x, mean, low, high)) in enumerate(panels.get(name, {}).items()):
                if len(x) == 0:
                    continue
                color = colors.setdefault(method, f"C{i % 10}")
                ax.plot(x, mean, color=color, lw=1.5, label=method)
                ax.fill_between(x, low, high, color=color, alpha=0.2, lw=0)
                for seed_x, seed_y in seed_lines.get(name, {}).get(method, ()):
                    ax.plot(seed_x, seed_y, color=color, lw=0.6, alpha=0.45)
                drawn += 1
            if drawn:
                ax.legend(fontsize=8, frameon=False)
            else:
                _no_data(ax)
            ax.set_title(name, fontsize=10)
            ax.set_xlabel(xlabel)
            ax.set_ylabel(yl)
            ax.grid(alpha=0.3)
        fig.suptitle(title, fontsize=11)
        return _save(fig, path, palette=True)
    finally:
        fig.clear()


def method_line_figure(path: Path, groups: Mapping[str, Sequence[Mapping[str, Any]]],
                       panels: Mapping[str, str], *, x: str = "step", title: str,
                       ylabel: str | Sequence[str], colors: Mapping[str, str] | None = None) -> Path:
    """Line-with-band figure of per-step metrics over seeds, grouped by method.

    Takes the output `path`; `groups` = {method: [run dicts, one per seed]}; `panels` =
    {panel title: metric key} (one subplot each; "eval_reward" reads the eval history); the x
    axis as in stats.mean_curve ("step" or "wall_time" = cumulative step time); title, y
    label(s) and colours as line_band_figure. Each method is its mean over seeds with a band
    (bootstrap CI, or min/max where only one seed has the step) and a thin line per seed.
    Returns `path`."""
    curves = {panel: method_curves(groups, key, x) for panel, key in panels.items()}
    seeds = {panel: {method: [method_curves({method: [run]}, key, x)[method][:2] for run in runs]
                     for method, runs in groups.items()}
             for panel, key in panels.items()}
    xlabel = "cumulative step time (s)" if x == wall_time_key else x
    return line_band_figure(path, curves, title=title, xlabel=xlabel, ylabel=ylabel, colors=colors,
                            seed_lines=seeds)


def bar_chart(path: Path, labels: Sequence[str], values: Sequence[float], *, title: str,
              ylabel: str, low: Sequence[float] | None = None, high: Sequence[float] | None = None,
              logy: bool = False, colors: Mapping[str, str] | None = None,
              points: Sequence[Sequence[float]] | None = None) -> Path:
    """Bar chart of one value per label, with optional CI error bars and value annotations.

    Takes the output `path`, bar `labels` and `values` (NaN draws no bar and is annotated
    "n/a"), the title and y label, optional per-bar CI bounds `low`/`high`, `logy` for a log
    y axis (used for proximal time, which spans orders of magnitude between recompute and
    log-linear; falls back to linear when no value is positive), optional {label: colour} and
    optional per-bar ``points`` (one value per seed, drawn as dots over the bar: with three
    seeds a CI alone hides whether one seed is off on its own).
    Every bar is annotated with its value so a zero or a tiny bar on a log axis stays
    readable. Returns `path`.
    """
    vals = np.asarray(values, dtype=float)
    fig = _new_figure()
    try:
        ax = fig.subplots()
        pos = np.arange(len(labels))
        palette = [(colors or {}).get(lab, f"C{i % 10}") for i, lab in enumerate(labels)]
        heights = np.where(np.isfinite(vals), vals, 0.0)
        yerr = None
        if low is not None and high is not None:
            lo, hi = np.asarray(low, dtype=float), np.asarray(high, dtype=float)
            yerr = np.nan_to_num(np.vstack([heights - lo, hi - heights]), nan=0.0).clip(min=0.0)
        ax.bar(pos, heights, color=palette, yerr=yerr, capsize=4)
        for p, seeds in zip(pos, points or [], strict=False):
            ys = np.asarray([v for v in seeds if v is not None and math.isfinite(v)], dtype=float)
            if ys.size:  # spread sideways so equal values stay countable
                xs = p + np.linspace(-0.15, 0.15, ys.size) if ys.size > 1 else np.full(1, float(p))
                ax.scatter(xs, ys, s=14, color="black", zorder=3, linewidths=0)
        if logy and (vals[np.isfinite(vals)] > 0).any():
            ax.set_yscale("log", nonpositive="clip")
        for p, v, h in zip(pos, vals, heights, strict=True):
            text = "n/a" if not math.isfinite(v) else f"{v:.3g}"
            ax.annotate(text, (p, h if h > 0 or not logy else ax.get_ylim()[0]),
                        ha="center", va="bottom", fontsize=8, xytext=(0, 2),
                        textcoords="offset points")
        if not len(labels):
            _no_data(ax)
        ax.set_xticks(pos, labels, fontsize=9)
        ax.set_title(title, fontsize=11)
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
        return _save(fig, path)
    finally:
        fig.clear()


def method_bar_chart(path: Path, stats: Mapping[str, Mapping[str, Mapping[str, float | None]]],
                     metric: str, **kwargs) -> Path:
    """Bar chart of one aggregated metric per method, with its CI as error bars.

    Takes the output `path`, `stats` = {method: {metric: {"mean", "ci_low", "ci_high", ...}}}
    (as stats.aggregate_methods returns; None counts as missing), the metric name, and
    bar_chart's keyword arguments (title, ylabel, logy, colors, points). Returns `path`."""
    labels = list(stats)

    def column(field: str) -> list[float]:
        """One field of every method's stat, None -> NaN."""
        vals = [stats[m].get(metric, {}).get(field) for m in labels]
        return [math.nan if v is None else float(v) for v in vals]

    return bar_chart(path, labels, column("mean"), low=column("ci_low"), high=column("ci_high"), **kwargs)



def heatmap(path: Path, matrix: Sequence[Sequence[float]], row_labels: Sequence[str],
            col_labels: Sequence[str], *, title: str, xlabel: str, ylabel: str, cbar_label: str,
            marked: Sequence[Sequence[bool]] | None = None, fmt: str = "{:.2f}") -> Path:
    """Annotated heatmap, e.g. final reward over (loss, K).

    Takes the output `path`; a (rows, cols) `matrix` (NaN cells are left blank and annotated
    "n/a"); row/column labels; the title, axis and colour-bar labels; an optional boolean
    `marked` matrix whose True cells get a hatch and a "×" after the value (used for collapsed
    runs); and the value format. Text colour flips with the cell brightness so annotations
    stay legible. Returns `path`.
    """
    data = np.asarray(matrix, dtype=float).reshape(len(row_labels), len(col_labels))
    marks = (np.zeros(data.shape, dtype=bool) if marked is None
             else np.asarray(marked, dtype=bool).reshape(data.shape))
    fig = _new_figure()
    try:
        ax = fig.subplots()
        finite = data[np.isfinite(data)]
        mid = (finite.min() + finite.max()) / 2 if finite.size else 0.0
        if finite.size:  # an all-NaN or empty grid has no colour scale to draw
            im = ax.imshow(np.ma.masked_invalid(data), cmap="viridis", aspect="auto")
            fig.colorbar(im, ax=ax, label=cbar_label)
        else:
            ax.set_xlim(-0.5, max(len(col_labels), 1) - 0.5)
            ax.set_ylim(max(len(row_labels), 1) - 0.5, -0.5)
            _no_data(ax)
        for (r, c), v in np.ndenumerate(data):
            text = "n/a" if not math.isfinite(v) else fmt.format(v)
            if marks[r, c]:
                text += " ×"
                # Hatch marks the cell even in greyscale prints, where "×" alone is easy to miss.
                ax.add_patch(_hatch_patch(r, c))
            color = "black" if math.isfinite(v) and v > mid else "white"
            ax.text(c, r, text, ha="center", va="center", fontsize=9,
                    color=color if math.isfinite(v) else "0.3")
        ax.set_xticks(range(len(col_labels)), [str(c) for c in col_labels])
        ax.set_yticks(range(len(row_labels)), [str(r) for r in row_labels])
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=11)
        return _save(fig, path)
    finally:
        fig.clear()


def _hatch_patch(row: int, col: int) -> Rectangle:
    """A transparent, red-hatched rectangle covering heatmap cell (row, col)."""
    return Rectangle((col - 0.5, row - 0.5), 1, 1, fill=False, hatch="xx", edgecolor="red",
                     lw=0)
