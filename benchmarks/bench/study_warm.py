"""The warm-start-level part of a planned study's report (plans with ``warm_starts`` > 1), all of it
secondary: the plan's test (Welch, or paired t by seed) keeps the verdicts it was registered with.

Why: seed s starts from warm start s % W, and the seeds of one warm start end close together (on the
2026-11-27 K = 16 study the ICC of the final reward is 0.71-0.95). A seed-level interval then
describes the W warm starts that were drawn; the warm-start-level one (:mod:`benchmarks.bench.warm_start`)
is the one that speaks for a new warm start. The paired gaps of a paired plan get the mixed model
d_ij = μ + u_i + e_ij beside the paired t, with its own Holm adjustment over the family and its own
verdict column. docs/studies.md explains both.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from benchmarks.bench import stats as S
from benchmarks.bench import wording as W
from benchmarks.bench.plan_file import StudyPlan
from benchmarks.bench.warm_start import icc, mixed_gap, warm_start_ci

ValueOf = Callable[[Mapping[str, Any], str], float]  # (run, endpoint) -> the run's endpoint value
ARM_ENDPOINTS = ("final_eval_reward", "eval_auc")


def warm_start_of(run: Mapping[str, Any], plan: StudyPlan) -> int:
    """The warm start a run started from: its params (what the study recorded), else seed % W (the rule
    the study suite applies, for runs recorded without it)."""
    block = (run.get("params") or {}).get("warm_start")
    return int(block) if block is not None else int(run.get("seed", 0)) % plan.warm_starts


def applies(plan: StudyPlan) -> bool:
    return plan.warm_starts > 1


def warm_start_arms(plan: StudyPlan, groups: Mapping[str, list], value_of: ValueOf) -> dict[str, dict]:
    """{arm: {endpoint: warm_start_ci(...) + "icc" + seed-level "seed_ci_low"/"seed_ci_high"}}."""
    out: dict[str, dict] = {}
    for arm, runs in groups.items():
        out[arm] = {}
        for endpoint in ARM_ENDPOINTS:
            values = [value_of(r, endpoint) for r in runs]
            blocks = [warm_start_of(r, plan) for r in runs]
            _, low, high = S.mean_ci(values)
            out[arm][endpoint] = {**warm_start_ci(values, blocks), "icc": icc(values, blocks),
                                  "seed_ci_low": low, "seed_ci_high": high}
    return out


def _gaps(plan: StudyPlan, groups: Mapping[str, list], arm: str, ref: str,
          value_of: ValueOf) -> tuple[list[float], list[int]]:
    """The paired gaps arm − reference of the seeds both arms finished with a finite endpoint, and each
    gap's warm start (the arm's run's: the two runs of a seed share it)."""
    a = {int(r.get("seed", 0)): r for r in groups.get(arm, [])}
    b = {int(r.get("seed", 0)): r for r in groups.get(ref, [])}
    gaps, blocks = [], []
    for seed in sorted(set(a) & set(b)):
        gap = value_of(a[seed], plan.endpoint) - value_of(b[seed], plan.endpoint)
        if math.isfinite(gap):
            gaps.append(gap)
            blocks.append(warm_start_of(a[seed], plan))
    return gaps, blocks


def mixed_family(plan: StudyPlan, groups: Mapping[str, list], family: Sequence[dict[str, Any]],
                 value_of: ValueOf) -> None:
    """Add "mixed" (mixed_gap's dict, or {"refused": reason} for an unbalanced comparison) to each
    comparison of a paired plan's family, in place, with "p_holm" and "verdict" under the mixed model:
    its p-values Holm-adjusted over the family as the plan adjusts the paired ones, so the secondary
    verdicts follow the same rule (Holm p < 0.05 differs, else TOST p < 0.05 equivalent, else undecided)."""
    for comp in family:
        arm, ref = comp["comparison"].split(" - ")
        gaps, blocks = _gaps(plan, groups, arm, ref, value_of)
        try:
            comp["mixed"] = mixed_gap(gaps, blocks, plan.margin)
        except ValueError as err:
            comp["mixed"] = {"refused": str(err), "p": math.nan, "p_tost": math.nan}
    mixed = [c["mixed"] for c in family]
    for m, p_adj in zip(mixed, S.holm([S.as_float(m.get("p")) for m in mixed]), strict=True):
        m["p_holm"] = p_adj
        m["verdict"] = "refused" if "refused" in m else S.verdict(p_adj, S.as_float(m.get("p_tost")))


def _ci(stat: Mapping[str, Any], low: str = "ci_low", high: str = "ci_high") -> str:
    return W.mean_pm(S.as_float(stat.get("mean")), (S.as_float(stat.get(high)) - S.as_float(stat.get(low))) / 2)


def _icc(x: Any) -> str:
    return "n/a" if not math.isfinite(S.as_float(x)) else f"{S.as_float(x):.2f}"


def arms_section(plan: StudyPlan, arms: Mapping[str, dict]) -> str:
    """The arms at the warm-start level, beside their seed-level intervals."""
    body = []
    for arm, by_end in arms.items():
        cells = [arm]
        for endpoint in ARM_ENDPOINTS:
            stat = by_end[endpoint]
            cells += [_ci(stat, "seed_ci_low", "seed_ci_high"), _ci(stat), _icc(stat["icc"])]
        body.append(cells)
    header = ["Arm"] + [f"{name}, {level}" for name in ("final eval reward", "eval AUC")
                        for level in ("seed level", f"warm-start level ({plan.warm_starts - 1} df)", "ICC")]
    return ("\n## Arms at the warm-start level (secondary)\n\n" + W.md_table(header, body) +
            f"\nSeed level: mean ± 95 % t half-width over the runs, as in the table above (it describes these "
            f"{plan.warm_starts} warm starts). Warm-start level: the mean of the {plan.warm_starts} warm-start "
            f"means ± its 95 % t half-width on {plan.warm_starts - 1} df (what speaks for a new warm start). "
            f"ICC: the share of the endpoint's variance between warm starts (one-way ANOVA, n/a without two "
            f"runs in a warm start).\n")


def _sd_pair(m: Mapping[str, Any]) -> str:
    between, within = (100 * S.as_float(m.get(k)) for k in ("sd_between", "sd_within"))
    return "n/a" if not math.isfinite(within) else f"{between:.1f} / {within:.1f}"


def mixed_section(plan: StudyPlan, family: Sequence[Mapping[str, Any]]) -> str:
    """The family under the mixed model, beside the paired t's gap and verdict."""
    body = []
    for comp in family:
        m = comp["mixed"]
        if "refused" in m:
            body.append([comp["comparison"], W.gap_ci(comp), W.verdict_words(comp), m["refused"],
                         "", "", "", "refused"])
            continue
        body.append([comp["comparison"], W.gap_ci(comp), W.verdict_words(comp), W.gap_ci(m), W.p_text(m["p_holm"]),
                     W.p_text(m["p_tost"]), _sd_pair(m), W.verdict_words({**m, "n_a": m["n"], "n_b": m["n"]})])
    df = plan.warm_starts - 1
    header = ["Comparison", "Gap, paired t by seed [95 % CI]", "Verdict (primary)",
              f"Gap, mixed model [95 % CI, {df} df]", "p (Holm)", f"TOST p (±{100 * plan.margin:g})",
              "SD between / within warm starts (points)", "Verdict under the mixed model (secondary)"]
    return ("\n## Primary family under a mixed model (secondary; the verdicts above stand)\n\n"
            + W.md_table(header, body) +
            f"\nMixed model: the paired gaps d_ij of warm start i and seed j as d_ij = μ + u_i + e_ij, warm start a "
            f"random effect; μ is the mean gap, its SE sqrt(MS between warm starts / N) (REML for a balanced "
            f"design; kept where REML puts the between SD at 0, as the exact test), t on {df} df; p "
            f"Holm-adjusted over the family; same verdict rule as above. Secondary: the plan's verdicts are "
            f"the paired t's.\n")


def build(plan: StudyPlan, groups: Mapping[str, list], family: list[dict[str, Any]],
          value_of: ValueOf) -> tuple[dict[str, Any], str, str]:
    """(summary entries, Markdown after the arms table, Markdown after the family's) of the warm-start
    level; nothing for a plan with one warm start, one line for a plan with one seed per warm start.
    Adds "mixed" to the family's dicts of a paired plan."""
    if not applies(plan):
        return {}, "", ""
    if plan.seeds <= plan.warm_starts:  # each warm start holds one seed: nothing to add but the words
        return {}, "\nEach warm start holds one seed: the intervals above are already at the warm-start level.\n", ""
    arms = warm_start_arms(plan, groups, value_of)
    extra: dict[str, Any] = {"warm_start_level": arms}
    if plan.test == "paired" and family:
        mixed_family(plan, groups, family, value_of)
        extra["mixed_verdicts"] = {c["comparison"]: c["mixed"]["verdict"] for c in family}
        return extra, arms_section(plan, arms), mixed_section(plan, family)
    note = ("\nThe plan's test is Welch: its seeds are not paired, so the mixed model of paired gaps does not "
            "apply.\n") if family else ""
    return extra, arms_section(plan, arms), note
