"""A plan's bar (``primary.bar``, :mod:`benchmarks.bench.plan_file`): each arm passes or fails by its
endpoint, its mean over seeds or every seed's value, against the bar the plan fixed before the runs.

A bar is not a test: it says whether the runs made reached it, not how likely the same arm is to
reach it again; a study with one seed per arm gets this verdict and no test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.bench import wording as W
from benchmarks.bench.stats import as_float
from benchmarks.bench.plan_file import StudyPlan


def _score(values: list[float], over: str) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if not finite or len(finite) < len(values):
        return math.nan
    return min(finite) if over == "each_seed" else sum(finite) / len(finite)


def bar_verdicts(plan: StudyPlan, groups: Mapping[str, list],
                 value: Callable[[Mapping[str, Any]], float]) -> list[dict[str, Any]]:
    """One row per arm with a bar: its values by seed, the score the bar judges (mean over seeds, or
    the lowest seed with ``bar_over: each_seed``) and the verdict: pass (score >= bar), fail, n/a
    (a run without the endpoint) or not run."""
    rows = []
    for arm, bar in plan.bars.items():
        runs = sorted(groups.get(arm, []), key=lambda r: int(r.get("seed", 0)))
        by_seed = [[int(r.get("seed", 0)), value(r)] for r in runs]
        score = _score([v for _, v in by_seed], plan.bar_over)
        verdict = "not run" if not runs else "n/a" if not math.isfinite(score) else "pass" if score >= bar else "fail"
        rows.append({"arm": arm, "bar": bar, "over": plan.bar_over, "endpoint": plan.endpoint, "by_seed": by_seed,
                     "score": score, "verdict": verdict})
    return rows


def show(x: float, endpoint: str) -> str:
    """A lift in points ("+17.6"), a z as it is ("+2.02"), any other endpoint as a reward ("0.412");
    a summary read back from JSON holds None where the value was NaN."""
    x = as_float(x)
    if not math.isfinite(x):
        return "n/a"
    if endpoint == "eval_lift":
        return f"{100 * x:+.1f}".replace("-", "−")
    return f"{x:+.2f}".replace("-", "−") if endpoint == "eval_lift_z" else f"{x:.3f}"


UNITS = {"eval_lift": " points", "eval_lift_z": ""}


def bar_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: arm, runs, value by seed, the judged score, the bar, the verdict."""
    body = []
    for r in rows:
        e = r["endpoint"]
        seeds = ", ".join(f"s{s}: {show(v, e)}" for s, v in r["by_seed"]) or "—"
        body.append([r["arm"], str(len(r["by_seed"])), seeds, show(r["score"], e), show(r["bar"], e), r["verdict"]])
    judged = "lowest seed" if rows and rows[0]["over"] == "each_seed" else "mean over seeds"
    return W.md_table(["Arm", "runs", "by seed", f"judged ({judged})", "bar", "verdict"], body)


def bar_line(row: Mapping[str, Any], words: str) -> str:
    """One headline line: "Verdict, sync on eval lift: pass (+17.6 points >= bar +15.0 points)"."""
    e, unit = row["endpoint"], UNITS.get(row["endpoint"], "")
    relation = "≥" if row["verdict"] == "pass" else "<" if row["verdict"] == "fail" else "vs"
    return (f"Verdict, {row['arm']} on {words}: {row['verdict']} ({show(row['score'], e)}{unit} {relation} bar "
            f"{show(row['bar'], e)}{unit})")
