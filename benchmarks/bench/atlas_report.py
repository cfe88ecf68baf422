"""The staleness atlas's report: per (loss, K) cell the final reward against sync, time to a target
reward, clipped/filtered tokens, importance-weight extremes, ESS and a collapse flag; heatmaps;
the policy-buffer and forward-lag rows; and the verdict per loss.

Definitions (docs/benchmarks.md says the same in prose):

- **sync**: ``ppo`` at K = 0 of the lag row (on-policy PPO-clip, i.e. sync GRPO). Every gap is
  cell − sync in eval-reward points, with the Welch 95 % interval over both arms' seeds, the Welch
  p-value Holm-adjusted over every comparison in the same row's table, a TOST equivalence p within
  ±``NEAR_SYNC`` and the minimum detectable difference (80 % power under that Holm adjustment) beside it.
- **verdict**: "differs" (Holm-adjusted p < 0.05), "equivalent" within ±NEAR_SYNC (TOST p < 0.05) or
  "undecided"; **below sync** = differs with a negative gap. One seed has no spread to test
  against, so it is always undecided.
- **collapsed**: the mean final eval reward ends more than ``COLLAPSE_MARGIN`` below the mean initial
  one, or some step had a non-finite loss or a skipped update.
- **target**: the train reward halfway between sync's start (mean of its first 5 steps) and its end
  (mean of its last 10); a run reaches it at the first step whose 5-step mean train reward is at or
  above it. Steps to target is the mean over the seeds that reach it, with how many did.
- **holds to K**: the largest K such that the loss is within ``NEAR_SYNC`` points of sync at that K
  and every smaller K of the lag row; **holds its own to K**: the same against the loss's own
  K = 0 cell (what staleness costs it, apart from how well it learns on fresh data).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from . import figures as F
from . import wording as W
from .stats import as_float as _num
from .stats import compare_arms, finite, mean_ci, ordered, run_value, seed_stat, verdicts_within

COLLAPSE_MARGIN = 0.02  # above the seed-to-seed eval noise of the tiny-model suites, far below learning
NEAR_SYNC = 0.03  # "stays within 3 points of sync"
# A-3PO's variants that keep a trust region without a forward pass, compared with A-3PO itself; a
# variant should cost nothing where A-3PO holds: equivalence within 2 points
A3PO_VARIANTS = ("a3po_floor", "a3po_floor8", "a3po_floor2", "a3po_ess", "decoupled_bounded", "a3po_seq")
VARIANT_MARGIN = 0.02
SYNC = ("ppo", 0)  # the reference cell: on-policy PPO-clip
TARGET_START, TARGET_END, TARGET_SMOOTH = 5, 10, 5
ROW_AXES = {"lag": ("K", "K (exact lag)"), "buffer": ("N", "N (policy buffer capacity)"),
            "forward": ("M", "M (minibatch updates per batch, K = 0)")}


def _row(run: Mapping[str, Any]) -> str:
    return (run.get("params") or {}).get("row", "lag")


def _col(run: Mapping[str, Any]) -> Any:
    key = ROW_AXES[_row(run)][0] if _row(run) in ROW_AXES else "K"
    value = (run.get("params") or {}).get(key)
    return "n/a" if value is None else value


def _cells(runs: Sequence[Mapping[str, Any]], row: str) -> dict[tuple[str, Any], list]:
    """{(loss, column value): runs} of one row."""
    cells: dict[tuple[str, Any], list] = {}
    for run in runs:
        if _row(run) == row:
            cells.setdefault((str(run.get("method")), _col(run)), []).append(run)
    return cells


def collapse_reasons(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """Why a cell counts as collapsed (empty = healthy). A ``loss`` of null counts as non-finite:
    results.json writes NaN as null; only an absent key means "not logged"."""
    reasons = []
    final = mean_ci([run_value(r, "final_eval_reward") for r in runs])[0]
    initial = mean_ci([run_value(r, "initial_eval_reward") for r in runs])[0]
    if final < initial - COLLAPSE_MARGIN:  # False when either is NaN
        reasons.append(f"final eval reward fell more than {COLLAPSE_MARGIN} below initial")
    recs = [rec for r in runs for rec in r.get("metrics") or []]
    if any("loss" in rec and not math.isfinite(_num(rec["loss"])) for rec in recs):
        reasons.append("non-finite loss")
    if any(_num(rec.get("skipped_updates")) > 0 for rec in recs):
        reasons.append("skipped updates")
    return reasons


def clip_or_mask(run: Mapping[str, Any]) -> float:
    """Mean over steps of clipped_tokens + masked_token_frac (a missing half counts as 0)."""
    per_step = []
    for rec in run.get("metrics") or []:
        pair = [_num(rec.get("clipped_tokens")), _num(rec.get("masked_token_frac"))]
        if any(math.isfinite(v) for v in pair):
            per_step.append(sum(v for v in pair if math.isfinite(v)))
    return float(np.mean(per_step)) if per_step else math.nan


def _extreme(run: Mapping[str, Any], key: str, pick) -> float:
    values = finite(_num(rec.get(key)) for rec in run.get("metrics") or [])
    return float(pick(values)) if values.size else math.nan


def _train_rewards(run: Mapping[str, Any]) -> np.ndarray:
    return np.array([_num(rec.get("reward_mean")) for rec in run.get("metrics") or [] if "reward_mean" in rec])


def target_reward(sync_runs: Sequence[Mapping[str, Any]]) -> float:
    """Halfway from sync's starting train reward to its final one (NaN without sync runs)."""
    starts, ends = [], []
    for run in sync_runs:
        rewards = finite(_train_rewards(run))
        if rewards.size >= TARGET_END:
            starts.append(rewards[:TARGET_START].mean())
            ends.append(rewards[-TARGET_END:].mean())
    return float((np.mean(starts) + np.mean(ends)) / 2) if starts else math.nan


def steps_to(run: Mapping[str, Any], target: float) -> float:
    """First step whose TARGET_SMOOTH-step mean train reward reaches ``target``; NaN if never."""
    rewards = _train_rewards(run)
    if not math.isfinite(target) or rewards.size < TARGET_SMOOTH:
        return math.nan
    smooth = np.convolve(rewards, np.ones(TARGET_SMOOTH) / TARGET_SMOOTH, mode="valid")
    hit = np.nonzero(smooth >= target)[0]
    return float(hit[0] + TARGET_SMOOTH) if hit.size else math.nan


def cell_stats(runs: Sequence[Mapping[str, Any]], sync_runs: Sequence[Mapping[str, Any]], target: float) -> dict:
    """Every statistic of one (loss, column) cell over its seeds."""
    final = [run_value(r, "final_eval_reward") for r in runs]
    sync_final = [run_value(r, "final_eval_reward") for r in sync_runs]
    gap = compare_arms(final, sync_final, NEAR_SYNC)  # verdict and below_sync: set per table (atlas_grids)
    reached = finite([steps_to(r, target) for r in runs])
    reasons = collapse_reasons(runs)
    return {
        "n": len(runs),
        "final_eval_reward": seed_stat(final),
        "initial_eval_reward": seed_stat([run_value(r, "initial_eval_reward") for r in runs]),
        "final_eval_answer_acc": seed_stat([run_value(r, "final_eval_answer_acc") for r in runs]),
        "gap_vs_sync": gap,
        "below_sync": False,
        "steps_to_target": float(reached.mean()) if reached.size else math.nan,
        "reached_target": int(reached.size),
        "clip_or_mask_frac": seed_stat([clip_or_mask(r) for r in runs]),
        "importance_weight_max": seed_stat([_extreme(r, "importance_weight_max", np.max) for r in runs]),
        "importance_weight_min": seed_stat([_extreme(r, "importance_weight_min", np.min) for r in runs]),
        "ess_frac": seed_stat([run_value(r, "ess_frac") for r in runs]),
        "collapsed": bool(reasons), "collapse_reasons": reasons,
    }


def holds_to(row: Mapping[str, Mapping[str, Any]], ks: Sequence[Any], own: bool = False) -> Any:
    """The largest K up to which a loss stays within NEAR_SYNC of sync at every K run (None: not even
    its smallest K). ``own``: of the loss's own first K instead of sync, so a loss that learns less
    than PPO even on fresh data is judged on what staleness takes from it."""
    last = None
    first = row.get(str(ks[0])) if ks else None
    if own and first is None:  # the loss has no cell at the row's first K: nothing to measure against
        return None
    for k in ks:
        cell = row.get(str(k))
        if cell is None:
            continue
        if own:
            gap = _num(cell["final_eval_reward"]["mean"]) - _num(first["final_eval_reward"]["mean"])
        else:
            gap = _num(cell["gap_vs_sync"]["mean"])
        if not gap >= -NEAR_SYNC:
            break
        last = k
    return last


def atlas_grids(runs: Sequence[Mapping[str, Any]]) -> dict:
    """{row: {"losses", "cols", "grid": {loss: {str(col): cell stats}}}}, the sync reference, the target."""
    sync_runs = _cells(runs, "lag").get(SYNC, [])
    target = target_reward(sync_runs)
    rows = {}
    for row in ROW_AXES:
        cells = _cells(runs, row)
        if not cells:
            continue
        losses = ordered([m for m, _ in cells])
        cols = sorted({c for _, c in cells}, key=lambda c: (isinstance(c, str), _num(c), str(c)))
        grid = {m: {str(c): cell_stats(cells[(m, c)], sync_runs, target) for c in cols if (m, c) in cells}
                for m in losses}
        rows[row] = {"losses": losses, "cols": cols, "grid": grid}
        _test_table(grid, row)
    if "lag" in rows:
        rows["lag"]["a3po_vs_recompute"] = _a3po_vs_recompute(_cells(runs, "lag"), rows["lag"]["cols"])
        rows["lag"]["variants_vs_a3po"] = _variants_vs_a3po(_cells(runs, "lag"), rows["lag"]["cols"])
    return {"rows": rows, "sync_n": len(sync_runs), "target_train_reward": target}


def _test_table(grid: Mapping[str, Mapping[str, Any]], row: str) -> None:
    """Verdicts of one row's gaps to sync, Holm-adjusted together (the sync cell itself is the
    reference, not a comparison)."""
    family = [cell["gap_vs_sync"] for m, by_col in grid.items() for c, cell in by_col.items()
              if not (row == "lag" and (m, c) == (SYNC[0], str(SYNC[1])))]
    verdicts_within(family)
    for m, by_col in grid.items():
        for c, cell in by_col.items():
            gap = cell["gap_vs_sync"]
            gap.setdefault("verdict", "reference")
            cell["below_sync"] = gap["verdict"] == "differs" and _num(gap["mean"]) < 0


def _a3po_vs_recompute(cells: Mapping[tuple[str, Any], list], cols: Sequence[Any]) -> dict:
    """{str(K): A-3PO (``decoupled``) − ``recompute`` final eval reward, compare_arms dict}, Holm-adjusted
    over the K of the lag row: the approximation against the exact proximal policy it stands for."""
    out = {}
    for k in cols:
        a, b = cells.get(("decoupled", k)), cells.get(("recompute", k))
        if a and b:
            out[str(k)] = compare_arms([run_value(r, "final_eval_reward") for r in a],
                                       [run_value(r, "final_eval_reward") for r in b], NEAR_SYNC)
    verdicts_within(list(out.values()))
    return out


def _variants_vs_a3po(cells: Mapping[tuple[str, Any], list], cols: Sequence[Any]) -> dict:
    """{"<variant> at K = k": variant − A-3PO (``decoupled``) final eval reward, compare_arms dict with
    equivalence margin VARIANT_MARGIN}, Holm-adjusted over the table: what each bound on A-3PO's α or
    weight gains at high staleness, and whether it costs anything where A-3PO holds."""
    out = {}
    for variant in A3PO_VARIANTS:
        for k in cols:
            a, b = cells.get((variant, k)), cells.get(("decoupled", k))
            if a and b:
                out[f"{variant} at K = {k}"] = compare_arms([run_value(r, "final_eval_reward") for r in a],
                                                            [run_value(r, "final_eval_reward") for r in b],
                                                            VARIANT_MARGIN)
    verdicts_within(list(out.values()))
    return out


def _matrix(block: Mapping[str, Any], key: str, field: str | None = "mean",
            transform: Callable[[float], float] | None = None) -> list[list[float]]:
    """One value per (loss, column): ``cell[key][field]`` (``cell[key]`` when field is None), NaN if absent."""
    def value(cell: Mapping[str, Any]) -> float:
        entry = cell.get(key)
        x = _num(entry if field is None else (entry or {}).get(field))
        return transform(x) if transform is not None and math.isfinite(x) else x

    return [[value(block["grid"][m].get(str(c), {})) for c in block["cols"]] for m in block["losses"]]


def _cell_text(cell: Mapping[str, Any] | None) -> str:
    """Final reward `mean ± half-width`, the gap to sync, ✗ if collapsed, — if never run."""
    if cell is None:
        return "—"
    stat, gap = cell["final_eval_reward"], cell["gap_vs_sync"]
    mean, low, high = (_num(stat[k]) for k in ("mean", "ci_low", "ci_high"))
    text = W.mean_pm(mean, (high - low) / 2)
    if math.isfinite(_num(gap["mean"])):
        text += f" ({100 * _num(gap['mean']):+.1f}{W.VERDICT_MARKS.get(gap.get('verdict'), '')})"
    return text + (" ✗" if cell["collapsed"] else "")


def _table(block: Mapping[str, Any], head: str) -> str:
    return W.md_table([f"Loss \\ {head}"] + [str(c) for c in block["cols"]],
                      [[m] + [_cell_text(block["grid"][m].get(str(c))) for c in block["cols"]]
                       for m in block["losses"]])


DIAGNOSE_FROM_K = 8  # the diagnostics tables: every K from here up (the largest alone if none reaches it)


def _diagnostics_tables(block: Mapping[str, Any]) -> str:
    high = [k for k in block["cols"] if _num(k) >= DIAGNOSE_FROM_K] or block["cols"][-1:]
    return "\n".join(_diagnostics_table(block, k) for k in high)


def _diagnostics_table(block: Mapping[str, Any], k: Any) -> str:
    """Lag row at one K: the diagnostics that say why a loss held or broke."""
    header = ["Loss", "steps to target (reached)", "clipped/filtered tokens", "max weight", "min weight",
              "ESS", "answer acc"]
    rows = []
    for m in block["losses"]:
        c = block["grid"][m].get(str(k))
        if c is None:
            continue
        steps = _num(c["steps_to_target"])
        rows.append([m, f"{steps:.0f} ({c['reached_target']}/{c['n']})" if math.isfinite(steps) else f"— (0/{c['n']})",
                     *(W.number(_num(c[key]["mean"])) for key in ("clip_or_mask_frac", "importance_weight_max",
                                                                  "importance_weight_min", "ess_frac",
                                                                  "final_eval_answer_acc"))])
    return (f"Diagnostics at K = {k} (means over seeds; weights are each run's extreme over steps):\n\n"
            + W.md_table(header, rows))


def _figures(fig_dir: Path, rows: Mapping[str, Any]) -> list[tuple[str, str]]:
    figs = []
    specs = [("final_eval_reward", "mean", "Final eval reward", "final eval reward", "{:.2f}"),
             ("gap_vs_sync", "mean", "Final eval reward − sync", "points (cell − sync)", "{:+.1f}"),
             ("final_eval_answer_acc", "mean", "Final answer accuracy (any answer format)", "accuracy", "{:.2f}"),
             ("clip_or_mask_frac", "mean", "Clipped or filtered token fraction", "fraction", "{:.2f}"),
             ("ess_frac", "mean", "Effective sample size fraction", "ESS / N", "{:.2f}"),
             ("steps_to_target", None, "Steps to the target train reward (n/a: not reached)", "steps", "{:.0f}"),
             ("importance_weight_max", "mean", "Largest importance weight (log10)", "log10 of the mean over "
              "seeds of each run's maximum", "{:.1f}")]
    transforms = {"importance_weight_max": lambda x: math.log10(x) if x > 0 else math.nan,
                  "gap_vs_sync": lambda x: 100 * x}
    mark = f"× = collapsed (final < initial − {COLLAPSE_MARGIN}, non-finite loss, or skipped updates)"
    for row, block in rows.items():
        marks = [[bool(block["grid"][m].get(str(c), {}).get("collapsed")) for c in block["cols"]]
                 for m in block["losses"]]
        for i, (key, field, title, cbar, fmt) in enumerate(specs if row == "lag" else specs[:2], start=1):
            name = f"{row}_{i}_{key}.png"
            F.heatmap(fig_dir / name, _matrix(block, key, field, transforms.get(key)), block["losses"],
                      [str(c) for c in block["cols"]],
                      title=f"{title} ({row} row)", xlabel=ROW_AXES[row][1], ylabel="loss",
                      cbar_label=cbar, marked=marks, fmt=fmt)
            figs.append((name, f"{title} per (loss, {ROW_AXES[row][0]}), mean over seeds; {mark}."))
    return figs


def build_atlas(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, list]:
    """(summary entries, Markdown, figures) of an atlas results.json."""
    grids = atlas_grids(results.get("runs") or [])
    rows = grids["rows"]
    parts = []
    caption = ("Cells: final eval reward, mean ± half-width of the 95% t interval over seeds, then (gap to "
               f"sync in points; * = differs, ≈ = equivalent within {100 * NEAR_SYNC:g} points, by the tests "
               "in the comparison tables); ✗ = collapsed; — = not run.")
    for row, block in rows.items():
        parts.append(f"**{row} row** ({ROW_AXES[row][1]})\n\n" + _table(block, ROW_AXES[row][0]))
    for row, block in rows.items():
        parts.append(f"Gaps to sync, {row} row:\n\n" + W.comparison_table(
            [(f"{m} at {ROW_AXES[row][0]} = {c}", block["grid"][m][str(c)]["gap_vs_sync"])
             for m in block["losses"] for c in block["cols"] if str(c) in block["grid"][m]
             and block["grid"][m][str(c)]["gap_vs_sync"].get("verdict") != "reference"]))
    if "lag" in rows:
        parts.append("A-3PO (decoupled) − recompute, lag row:\n\n" + W.comparison_table(
            [(f"K = {k}", c) for k, c in rows["lag"]["a3po_vs_recompute"].items()]))
        if rows["lag"]["variants_vs_a3po"]:
            parts.append(f"A-3PO variants − A-3PO (decoupled), lag row (equivalence within "
                         f"±{100 * VARIANT_MARGIN:g} points):\n\n" + W.comparison_table(
                             list(rows["lag"]["variants_vs_a3po"].items())))
        parts.append(_diagnostics_tables(rows["lag"]))
        holds = {m: holds_to(rows["lag"]["grid"][m], rows["lag"]["cols"]) for m in rows["lag"]["losses"]}
        holds_own = {m: holds_to(rows["lag"]["grid"][m], rows["lag"]["cols"], own=True)
                     for m in rows["lag"]["losses"] if str(rows["lag"]["cols"][0]) in rows["lag"]["grid"][m]}
    else:
        holds, holds_own = {}, {}
    target = grids["target_train_reward"]
    parts.append(caption + (f" Target train reward: {target:.3f}." if math.isfinite(target) else ""))
    collapsed = [[row, m, c] for row, b in rows.items() for m in b["losses"] for c in b["cols"]
                 if b["grid"][m].get(str(c), {}).get("collapsed")]
    extra = {"rows": rows, "target_train_reward": target, "sync_n": grids["sync_n"], "holds_to_k": holds,
             "holds_own_to_k": holds_own,
             "near_sync": NEAR_SYNC, "collapse_margin": COLLAPSE_MARGIN, "collapsed": collapsed}
    return extra, "\n".join(parts), _figures(fig_dir, rows)
