"""The report of a planned study (:mod:`benchmarks.bench.suite_study`): verdicts for the plan's one
Holm family on its primary endpoint, and every other number marked exploratory.

Endpoints per run: ``final_eval_reward`` (the last evaluation), and ``eval_auc``, the area under the
eval-reward curve divided by its step range (the curve's mean, trapezoid rule), which separates "learns
slower" from "ends worse" when evaluation runs along the way (``eval.every``); ``eval_lift``, the final
eval reward minus the same run's step-0 one, and ``eval_lift_z``, that lift over its standard error's
bound (:mod:`benchmarks.bench.lift`), the endpoints of learning studies judged by a bar
(:mod:`benchmarks.bench.study_bar`).
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
from benchmarks.bench import study_drops as D
from benchmarks.bench import wording as W
from benchmarks.bench.lift import eval_lift, eval_lift_z
from benchmarks.bench.paired import compare_paired
from benchmarks.bench.plan_file import LIFT_ENDPOINTS, Comparison, StudyPlan, stored_plan
from benchmarks.bench.study_bar import bar_line, bar_table, bar_verdicts
from benchmarks.bench.study_warm import build as warm_start_level

ENDPOINT_WORDS = {"final_eval_reward": "final eval reward", "eval_auc": "eval reward AUC (curve mean)",
                  "eval_lift": "eval reward lift (last step minus step 0)",
                  "eval_lift_z": "eval reward lift over its SE bound (z)"}


def eval_auc(run: Mapping[str, Any]) -> float:
    """The mean of a run's eval-reward curve over its steps (trapezoid); NaN with fewer than two points."""
    points = sorted((float(r["step"]), S.as_float(r.get("eval_reward"))) for r in S.eval_records(run))
    points = [(x, y) for x, y in points if math.isfinite(y)]
    if len(points) < 2 or points[-1][0] == points[0][0]:
        return math.nan
    xs, ys = np.array([p[0] for p in points]), np.array([p[1] for p in points])
    return float(np.trapezoid(ys, xs) / (xs[-1] - xs[0]))


_COMPUTED = {"eval_auc": eval_auc, "eval_lift": eval_lift, "eval_lift_z": eval_lift_z}


def endpoint_value(run: Mapping[str, Any], endpoint: str) -> float:
    return _COMPUTED[endpoint](run) if endpoint in _COMPUTED else S.run_value(run, endpoint)


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
    if family:
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
    lift = plan.endpoint in LIFT_ENDPOINTS  # a learning study's table adds the lift
    endpoints = ("final_eval_reward", "eval_auc", *(("eval_lift",) if lift else ()))
    body = []
    for arm, runs in groups.items():
        cells = [arm, str(len(runs)), str(len({r.get('params', {}).get('warm_start') for r in runs}))]
        for endpoint in endpoints:
            values = [endpoint_value(r, endpoint) for r in runs]
            mean, low, high = S.mean_ci([100 * v for v in values] if endpoint == "eval_lift" else values)
            cells.append(W.mean_pm(mean, (high - low) / 2))
        body.append(cells)
    return W.md_table(["Arm", "runs", "warm starts", "final eval reward", "eval AUC",
                       *(("eval lift (points)",) if lift else ())], body)


def _plan_line(plan: StudyPlan, family: list) -> str:
    """What the plan fixed: endpoint, test and family, or bar, seeds."""
    seeds = f"{plan.seeds} seeds per arm over {plan.warm_starts} warm start(s); plan sha256 {plan.sha256[:12]}.\n"
    if not plan.bars and plan.endpoint not in LIFT_ENDPOINTS:  # the committed studies' wording, unchanged
        test = "paired t by seed" if plan.test == "paired" else "Welch"
        return (f"Primary endpoint: {ENDPOINT_WORDS[plan.endpoint]}; test: {test}; one Holm family of "
                f"{len(family)}; equivalence margin ±{100 * plan.margin:g} points; {seeds}")
    parts = [f"Primary endpoint: {ENDPOINT_WORDS[plan.endpoint]}"]
    if family:
        parts.append(f"one Holm family of {len(family)} ({'paired t by seed' if plan.test == 'paired' else 'Welch'}, "
                     f"equivalence margin ±{100 * plan.margin:g} points)")
    if plan.bars:
        parts.append("each arm judged against its bar by its " + (
            "lowest seed" if plan.bar_over == "each_seed" else "mean over seeds") + " (no test)")
    if not (family or plan.bars):
        parts.append("no criterion fixed: every number is descriptive")
    if plan.seed_values:
        seeds = seeds.replace(f"{plan.seeds} seeds per arm", f"seeds {', '.join(map(str, plan.seed_values))} of every arm")
    return "; ".join(parts) + "; " + seeds


def _exploratory_table(rows: Sequence[Mapping[str, Any]]) -> str:
    body = [[r["comparison"], ENDPOINT_WORDS[r["endpoint"]], W.gap_ci(r), W.p_text(r.get("p")),
             f"{100 * S.as_float(r.get('mde')):.1f}".replace("nan", "n/a")] for r in rows]
    return W.md_table(["Comparison", "Endpoint", "Gap, points [95 % CI]", "p (unadjusted)", "MDE (points)"], body)


def build_study(results: Mapping[str, Any], fig_dir: Path, methods: dict) -> tuple[dict, str, list]:
    """(summary entries, Markdown, figures) of a study: the plan, the arms, the primary family's
    verdicts, the exploratory numbers, eval curves."""
    plan = stored_plan(dict(results))
    groups = S.group_by_method(results.get("runs") or [], tuple(plan.arms))
    family, explore = primary_family(plan, groups), exploratory(plan, groups)
    test = "paired t by seed" if plan.test == "paired" else "Welch"
    bars = bar_verdicts(plan, groups, lambda run: endpoint_value(run, plan.endpoint))
    warm, warm_arms, warm_family = warm_start_level(plan, groups, family, endpoint_value)  # secondary
    parts = [f"## Plan: {plan.name}\n", *([f"{plan.question}\n"] if plan.question else []),
             _plan_line(plan, family), "## Arms\n", _arm_table(plan, groups) + warm_arms]
    if bars:
        parts += ["\n## Bar (the study's verdicts)\n", bar_table(bars)]
    if family:
        parts += ["\n## Primary family (the study's verdicts)\n",
                  W.comparison_table([(c["comparison"], c) for c in family]).replace("Welch", test) + warm_family]
    if explore:
        parts += ["\n## Exploratory (no verdicts; p-values unadjusted)\n", _exploratory_table(explore)]
    drops = D.late_drops(groups) if D.applies(groups) else None  # runs that evaluated along the way only
    if drops:
        parts.append(D.drops_section(drops))
    colors = F.method_colors(list(groups))
    figures = R.line_figures(fig_dir, groups, [
        ("fig1_eval_reward.png", {"": "eval_reward"}, "step", "Eval reward vs step", "eval reward",
         "Eval reward vs step per arm")], colors)
    extra = {"plan": plan.as_dict(), "primary": family, "exploratory": explore,
             "verdicts": {c["comparison"]: c["verdict"] for c in family}, **warm}
    if bars:  # absent otherwise: the committed studies' summaries stay as they were
        extra.update(bar=bars, bar_verdicts={r["arm"]: r["verdict"] for r in bars})
    if drops:
        extra["late_drops"] = drops
    return extra, "\n".join(parts), figures


def headline_study(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    """One line per comparison of the primary family, with its verdict."""
    plan = summary.get("plan") or {}
    endpoint = ENDPOINT_WORDS.get((plan.get("primary") or {}).get("endpoint"), "endpoint")
    return ([bar_line(row, endpoint) for row in summary.get("bar") or []]
            + [f"Verdict, {c['comparison']} on {endpoint}: {W.comparison(c)}" for c in summary.get("primary") or []])
