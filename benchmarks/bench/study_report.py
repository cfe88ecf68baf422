"""The report of a planned study (:mod:`benchmarks.bench.suite_study`): verdicts for the plan's one
Holm family on its primary endpoint, and every other number marked exploratory.

Endpoints per run: ``final_eval_reward`` (the last evaluation), and ``eval_auc``, the area under the
eval-reward curve divided by its step range (the curve's mean, trapezoid rule), which separates "learns
slower" from "ends worse" when evaluation runs along the way (``eval.every``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench import figures as F
from benchmarks.bench import report as R
from benchmarks.bench import stats as S
from benchmarks.bench import wording as W
from benchmarks.bench.paired import compare_paired
from benchmarks.bench.plan_file import Comparison, StudyPlan, stored_plan

ENDPOINT_WORDS = {"final_eval_reward": "final eval reward", "eval_auc": "eval reward AUC (curve mean)"}


def eval_auc(run: Mapping[str, Any]) -> float:
    """The mean of a run's eval-reward curve over its steps (trapezoid); NaN with fewer than two points."""
    points = sorted((float(r["step"]), S.as_float(r.get("eval_reward"))) for r in S.eval_records(run))
    points = [(x, y) for x, y in points if math.isfinite(y)]
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return math.nan
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    return float(np.trapezoid(ys, xs) / (xs[-1] - xs[0]))


def endpoint_value(run: Mapping[str, Any], endpoint: str) -> float:
    return eval_auc(run) if endpoint == "eval_auc" else S.run_value(run, endpoint)


def by_seed(runs: Sequence[Mapping[str, Any]], endpoint: str) -> dict[int, float]:
    return {int(r.get("seed", 0)): endpoint_value(r, endpoint) for r in runs}


def compare(plan: StudyPlan, groups: Mapping[str, list], comp: Comparison, endpoint: str) -> dict[str, Any]:
    """One comparison's test (the plan's: Welch, or paired by seed over the seeds both arms have)."""
    arm, ref = by_seed(groups.get(comp.arm, []), endpoint), by_seed(groups.get(comp.reference, []), endpoint)
    if plan.test == "paired":
        shared = sorted(set(arm) & set(ref))
        out = compare_paired([arm[s] for s in shared], [ref[s] for s in shared], plan.margin)
    else:
        out = S.compare_arms(list(arm.values()), list(ref.values()), plan.margin)
    out.update(comparison=comp.label, endpoint=endpoint, test=plan.test)
    return out


def primary_family(plan: StudyPlan, groups: Mapping[str, list]) -> list[dict[str, Any]]:
    """The plan's family on its primary endpoint, Holm-adjusted together: the only verdicts."""
    family = [compare(plan, groups, c, plan.endpoint) for c in plan.family]
    S.verdicts_within(family)
    return family


def exploratory(plan: StudyPlan, groups: Mapping[str, list]) -> list[dict[str, Any]]:
    """Everything else: the family on the other endpoint, and the plan's exploratory comparisons on
    both; unadjusted p-values and no verdict."""
    other = [e for e in ("final_eval_reward", "eval_auc") if e != plan.endpoint]
    rows = [compare(plan, groups, c, e) for c in plan.family for e in other]
    rows += [compare(plan, groups, c, e) for c in plan.exploratory for e in (plan.endpoint, *other)]
    for row in rows:
        row["verdict"] = "exploratory"
    return rows


def _arm_table(plan: StudyPlan, groups: Mapping[str, list]) -> str:
    body = []
    for arm, runs in groups.items():
        cells = [arm, str(len(runs)), str(len({r.get('params', {}).get('warm_start') for r in runs}))]
        for endpoint in ("final_eval_reward", "eval_auc"):
            mean, low, high = S.mean_ci([endpoint_value(r, endpoint) for r in runs])
            cells.append(W.mean_pm(mean, (high - low) / 2))
        body.append(cells)
    return W.md_table(["Arm", "runs", "warm starts", "final eval reward", "eval AUC"], body)


def _exploratory_table(rows: Sequence[Mapping[str, Any]]) -> str:
    body = [[r["comparison"], ENDPOINT_WORDS[r["endpoint"]], W.gap_ci(r), W._p(r.get("p")),
             f"{100 * S.as_float(r.get('mde')):.1f}".replace("nan", "n/a")] for r in rows]
    return W.md_table(["Comparison", "Endpoint", "Gap, points [95 % CI]", "p (unadjusted)", "MDE (points)"], body)


def build_study(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, list]:
    """(summary entries, Markdown, figures) of a study: the plan, the arms, the primary family's
    verdicts, the exploratory numbers, eval curves."""
    plan = stored_plan(dict(results))
    groups = S.group_by_method(results.get("runs") or [], tuple(plan.arms))
    family, explore = primary_family(plan, groups), exploratory(plan, groups)
    test = "paired t by seed" if plan.test == "paired" else "Welch"
    parts = [f"## Plan: {plan.name}\n", *([f"{plan.question}\n"] if plan.question else []),
             f"Primary endpoint: {ENDPOINT_WORDS[plan.endpoint]}; test: {test}; one Holm family of "
             f"{len(family)}; equivalence margin ±{100 * plan.margin:g} points; {plan.seeds} seeds per arm over "
             f"{plan.warm_starts} warm start(s); plan sha256 {plan.sha256[:12]}.\n",
             "## Arms\n", _arm_table(plan, groups),
             "\n## Primary family (the study's verdicts)\n",
             W.comparison_table([(c["comparison"], c) for c in family]).replace("Welch", test)]
    if explore:
        parts += ["\n## Exploratory (no verdicts; p-values unadjusted)\n", _exploratory_table(explore)]
    colors = F.method_colors(list(groups))
    figures = R.line_figures(fig_dir, groups, [
        ("fig1_eval_reward.png", {"": "eval_reward"}, "step", "Eval reward vs step", "eval reward",
         "Eval reward vs step per arm")], colors)
    extra = {"plan": plan.as_dict(), "primary": family, "exploratory": explore,
             "verdicts": {c["comparison"]: c["verdict"] for c in family}}
    return extra, "\n".join(parts), figures


def headline_study(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    """One line per comparison of the primary family, with its verdict."""
    plan = summary.get("plan") or {}
    endpoint = ENDPOINT_WORDS.get((plan.get("primary") or {}).get("endpoint"), "endpoint")
    return [f"Verdict, {c['comparison']} on {endpoint}: {W.comparison(c)}" for c in summary.get("primary") or []]
