"""Drops of the eval reward between consecutive evaluations: a planned study's secondary count, per arm.

Why: on the 2026-11-28 agent study every run's eval reward rose from step 0 by step 30, and three
A-3PO runs then fell by more than 5 points by step 40 (one to 0.11), none of sync's. A final-reward
test sees such a fall only as spread; counting the falls says whether an arm's runs collapse along
the way, and when. A **drop** is a fall of the eval reward by more than :data:`DROP` (5 points)
from one evaluation to the next (any two consecutive points of the run's eval curve, step 0
included); a fall of exactly 5 points (to 1e-9) is not one.

The count is descriptive (no verdict, no test): the report gives, per arm, the runs with at least one
drop, the drops in all, the step windows they fell in and the largest fall. It applies to any study
whose runs evaluate along the way (some run has three or more evaluations); with two (start and end)
a fall is just a negative lift. docs/studies.md, "Drops along the way".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.bench import stats as S
from benchmarks.bench import wording as W

DROP = 0.05  # a fall of more than 5 points of eval reward between consecutive evaluations
_TOLERANCE = 1e-9  # 0.65 - 0.60 is 0.05000000000000004 in floats: exactly 5 points is not a drop


def curve(run: Mapping[str, Any]) -> list[tuple[float, float]]:
    """A run's eval curve as (step, reward), by step, its non-finite points left out."""
    points = sorted((S.as_float(r.get("step")), S.as_float(r.get("eval_reward"))) for r in S.eval_records(run))
    return [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)]


def drops(points: Sequence[tuple[float, float]], drop: float = DROP) -> list[dict[str, float]]:
    """Each fall of more than ``drop`` between consecutive points of ``points`` ((step, reward), by
    step): {"from", "to" (steps), "before", "after" (rewards), "fall" (before − after)}."""
    out = []
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if y0 - y1 > drop + _TOLERANCE:
            out.append({"from": x0, "to": x1, "before": y0, "after": y1, "fall": y0 - y1})
    return out


def _step(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


def window(d: Mapping[str, float]) -> str:
    """"30-40": the steps of the two evaluations a drop fell between."""
    return f"{_step(d['from'])}-{_step(d['to'])}"


def arm_drops(runs: Sequence[Mapping[str, Any]], drop: float = DROP) -> dict[str, Any]:
    """One arm's count: runs, runs with at least one drop, drops in all, drops per step window, the
    largest fall (0 without drops) and every drop with its run's seed."""
    found = [{"seed": int(r.get("seed", 0)), **d} for r in runs for d in drops(curve(r), drop)]
    windows: dict[str, int] = {}
    for d in sorted(found, key=lambda d: (d["from"], d["seed"])):
        windows[window(d)] = windows.get(window(d), 0) + 1
    return {"runs": len(runs), "runs_with_drop": len({d["seed"] for d in found}), "drops": len(found),
            "windows": windows, "largest": max((d["fall"] for d in found), default=0.0), "list": found}


def applies(groups: Mapping[str, Sequence[Mapping[str, Any]]]) -> bool:
    """Whether some run evaluated along the way (three or more evaluations)."""
    return any(len(curve(r)) >= 3 for runs in groups.values() for r in runs)


def late_drops(groups: Mapping[str, Sequence[Mapping[str, Any]]], drop: float = DROP) -> dict[str, Any]:
    """{"drop": the threshold, "arms": {arm: arm_drops(...)}} for every arm, in the groups' order."""
    return {"drop": drop, "arms": {arm: arm_drops(runs, drop) for arm, runs in groups.items()}}


def _where(count: Mapping[str, Any]) -> str:
    """"30-40: s1, s6; 10-20: s8" (the windows by step, each with the seeds that dropped in it)."""
    by_window: dict[str, list[str]] = {}
    for d in sorted(count["list"], key=lambda d: (d["from"], d["seed"])):
        by_window.setdefault(window(d), []).append(f"s{d['seed']}")
    return "; ".join(f"{w}: {', '.join(seeds)}" for w, seeds in by_window.items()) or "none"


def drops_section(counts: Mapping[str, Any]) -> str:
    """The report's Markdown: a heading, what a drop is, one row per arm."""
    body = [[arm, str(c["runs"]), str(c["runs_with_drop"]), str(c["drops"]), _where(c),
             f"{100 * c['largest']:.1f}" if c["drops"] else "–"] for arm, c in counts["arms"].items()]
    return (f"\n## Drops along the way (secondary; descriptive)\n\nA drop: the eval reward falls by more than "
            f"{100 * counts['drop']:g} points from one evaluation to the next.\n\n"
            + W.md_table(["Arm", "runs", "runs with a drop", "drops", "where (steps: seeds)",
                          "largest fall (points)"], body))
