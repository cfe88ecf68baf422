"""One report across planned studies that differ only in learning rate:
``python -m benchmarks study --compare DIR1 DIR2 ... --out OUT`` writes ``OUT/compare.md`` and
``OUT/compare.json``: per comparison of the plans' Holm family, one row per learning rate with the
paired gap and interval, the plan's (paired) verdict and the mixed model's secondary verdict
(:mod:`benchmarks.bench.study_warm`); each arm's endpoint at each rate over the seeds and over the
warm starts; and a headline answering, at each rate, whether the α floor (a3po_floor) and VESPO end
within the margin of sync.

A folder that does not exist yet, or holds fewer runs than its plan, is "not run": the report is
written before every rate has run, and says which have. Its plan (for its label) is the one in its
results.json, else its frozen ``plan.yaml``, else ``benchmarks/plans/<folder name>.yaml`` (how the
pre-registered plans and their results folders are named). Plans that differ in anything but
``trainer.lr`` (and their name, question and hash) are refused in one line: the table would then
compare more than the learning rate.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.bench import report as R
from benchmarks.bench import stats as S
from benchmarks.bench import wording as W
from benchmarks.bench.plan_file import PLAN_COPY, StudyPlan, load_plan, stored_plan
from benchmarks.bench.study import RESULTS_FILE, load_study
from benchmarks.bench.study_report import endpoint_value, primary_family
from benchmarks.bench.study_warm import build as warm_start_level

PLANS = Path(__file__).resolve().parents[1] / "plans"
NOT_RUN = "not run"
LR = "trainer.lr"
HEADLINE_ARMS = ("a3po_floor", "vespo")  # the question the learning-rate plans were registered to answer
REFERENCE = "sync"


@dataclass
class Rate:
    """One study folder: its plan (None when none can be found), whether it ran, and its family."""

    folder: Path
    plan: StudyPlan | None = None
    note: str = ""  # why it is "not run"; empty when it ran
    n_runs: int = 0
    family: list[dict[str, Any]] = field(default_factory=list)
    arms: dict[str, Any] = field(default_factory=dict)  # per arm: the endpoint at the seed and warm-start level

    @property
    def lr(self) -> float | None:
        return plan_lr(self.plan) if self.plan is not None else None

    @property
    def label(self) -> str:
        return f"lr {_rate(self.lr)}" if self.lr is not None else self.folder.name

    @property
    def ran(self) -> bool:
        return not self.note


def _rate(lr: float) -> str:
    """2.5e-5, as the plans write it (Python's :g writes 2.5e-05)."""
    return f"{lr:g}".replace("e-0", "e-").replace("e+0", "e+")


def plan_lr(plan: StudyPlan) -> float | None:
    """The one learning rate of a plan's arms (an arm's own, else the common one); ValueError when the
    arms train at different rates, since a row per rate would then mix them."""
    rates = {float(arm.get(LR, plan.common.get(LR, math.nan))) for arm in plan.arms.values()}
    rates = {r for r in rates if math.isfinite(r)}
    if len(rates) > 1:
        raise ValueError(f"--compare: plan {plan.name!r} trains its arms at several learning rates "
                         f"({', '.join(f'{r:g}' for r in sorted(rates))})")
    return rates.pop() if rates else None


def _skeleton(plan: StudyPlan) -> dict[str, Any]:
    """The plan without what may differ between the compared studies: the learning rate, the name, the
    question and the hash."""
    data = copy.deepcopy(plan.as_dict())
    for key in ("name", "question", "sha256"):
        data.pop(key, None)
    for switches in (data["common"], *data["arms"].values()):
        switches.pop(LR, None)
    return data


def _first_difference(a: Any, b: Any, where: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            if a.get(key) != b.get(key):
                return _first_difference(a.get(key), b.get(key), f"{where}.{key}" if where else str(key))
    return where or "the plan"


def _find_plan(folder: Path) -> StudyPlan | None:
    for path in (folder / PLAN_COPY, PLANS / f"{folder.name}.yaml"):
        if path.is_file():
            return load_plan(path)
    return None


def read_rate(folder: Path) -> Rate:
    """One folder as a Rate: "not run" without results.json or with fewer finished runs than its plan
    (an arm missing a seed, or a seed without a finite endpoint), else its family with the mixed model."""
    rate = Rate(Path(folder))
    if not (rate.folder / RESULTS_FILE).exists():
        rate.plan = _find_plan(rate.folder)
        rate.note = "no folder" if not rate.folder.exists() else f"no {RESULTS_FILE}"
        return rate
    results = load_study(rate.folder)
    rate.plan = stored_plan(results)
    runs = results.get("runs") or []
    groups = S.group_by_method(runs, tuple(rate.plan.arms))
    rate.n_runs = len(runs)
    expected = len(rate.plan.arms) * len(rate.plan.seed_ids)
    finished = sum(1 for arm in rate.plan.arms for r in groups.get(arm, [])
                   if math.isfinite(endpoint_value(r, rate.plan.endpoint)))
    if finished < expected:
        rate.note = f"partial: {finished} of {expected} runs"
        return rate
    rate.family = primary_family(rate.plan, groups)
    extra, _, _ = warm_start_level(rate.plan, groups, rate.family, endpoint_value)  # adds "mixed" to the family
    rate.arms = {arm: by_endpoint.get(rate.plan.endpoint, {})
                 for arm, by_endpoint in (extra.get("warm_start_level") or {}).items()}
    return rate


def read_rates(folders: Sequence[str | Path]) -> list[Rate]:
    """The folders as Rates, by learning rate (a folder whose plan is unknown last); ValueError when two
    known plans differ in more than the learning rate, or no folder has a plan."""
    rates = [read_rate(Path(f)) for f in folders]
    known = [r for r in rates if r.plan is not None]
    if not known:
        raise ValueError("--compare: no plan in any folder (results.json, plan.yaml) nor in benchmarks/plans")
    base = _skeleton(known[0].plan)
    for rate in known[1:]:
        other = _skeleton(rate.plan)
        if other != base:
            raise ValueError(f"--compare: {rate.folder} differs from {known[0].folder} in more than the learning "
                             f"rate ({_first_difference(base, other)})")
    return sorted(rates, key=lambda r: (r.lr is None, r.lr or 0.0))


def _lag(plan: StudyPlan, arms: Sequence[str]) -> str:
    lags = {str(plan.arms[a].get("async.lag", plan.common.get("async.lag", "?"))) for a in arms if a in plan.arms}
    return lags.pop() if len(lags) == 1 else "?"


def _answer(verdict: Any, p_tost: Any = None) -> str:
    """A family verdict as an answer to "within the margin?". "differs" puts Holm's test first, so a
    gap can differ from 0 and still lie within the margin (its TOST p < 0.05): that is a yes."""
    if str(verdict) == "differs" and S.as_float(p_tost) < S.ALPHA:
        return f"yes, though it differs from 0 (TOST p {W.p_text(p_tost)})"
    return {"equivalent": "yes", "differs": "no, differs"}.get(str(verdict), str(verdict))


def headline(rates: Sequence[Rate], arms: Sequence[str] = HEADLINE_ARMS, reference: str = REFERENCE) -> str:
    """"Do a3po_floor and vespo end within 3 points of sync at K = 16? lr 2.5e-5: ...; lr 5e-5: not run." """
    plan = next(r.plan for r in rates if r.plan is not None)
    asked = [a for a in arms if f"{a} - {reference}" in [c.label for c in plan.family]]
    question = (f"Do {' and '.join(asked)} end within {100 * plan.margin:g} points of {reference} at "
                f"K = {_lag(plan, asked)}?")
    answers = []
    for rate in rates:
        if not rate.ran:
            answers.append(f"{rate.label}: {NOT_RUN}")
            continue
        by_label = {c["comparison"]: c for c in rate.family}
        parts = []
        for arm in asked:
            comp = by_label[f"{arm} - {reference}"]
            mixed = (comp.get("mixed") or {}).get("verdict")
            gap = f"{100 * S.as_float(comp.get('mean')):+.1f} points".replace("-", "−")
            mixed_tost = (comp.get("mixed") or {}).get("p_tost")
            parts.append(f"{arm} {_answer(comp.get('verdict'), comp.get('p_tost'))} ({gap}" +
                         (f"; mixed model: {_answer(mixed, mixed_tost)})" if mixed else ")"))
        answers.append(f"{rate.label}: " + "; ".join(parts))
    return question + " " + ". ".join(answers) + "."


def _row(rate: Rate, label: str) -> dict[str, Any]:
    """One comparison at one rate, as compare.json stores it (the gaps in reward units, as summary.json)."""
    out: dict[str, Any] = {"rate": rate.label, "lr": rate.lr, "folder": str(rate.folder),
                           "status": "run" if rate.ran else NOT_RUN, "note": rate.note}
    comp = next((c for c in rate.family if c["comparison"] == label), None)
    if comp is not None:
        out["paired"] = {k: comp.get(k) for k in ("mean", "ci_low", "ci_high", "p_holm", "p_tost", "mde",
                                                  "n_a", "n_b", "margin", "verdict")}
        mixed = comp.get("mixed")
        out["mixed"] = None if mixed is None else {k: mixed.get(k) for k in (
            "mean", "ci_low", "ci_high", "df", "p_holm", "p_tost", "sd_between", "sd_within", "n",
            "margin", "verdict", "refused") if k in mixed}
    return out


def _md_rows(rows: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    body = []
    for row in rows:
        if row["status"] == NOT_RUN:
            body.append([row["rate"], f"{NOT_RUN} ({row['note']})", "", "", "", ""])
            continue
        paired, mixed = row["paired"], row.get("mixed")
        n = str(paired.get("n_a"))
        mixed_cells = (["n/a (no mixed model for this plan: see its table.md)", "n/a"] if mixed is None else
                       [mixed.get("refused", ""), "refused"] if "refused" in mixed else
                       [W.gap_ci(mixed), W.verdict_words({**mixed, "n_a": mixed["n"], "n_b": mixed["n"]})])
        body.append([row["rate"], n, W.gap_ci(paired), W.verdict_words(paired), *mixed_cells])
    return body


def _arm_cell(stat: Mapping[str, Any] | None) -> str:
    """"0.435 ± 0.035 (± 0.120 by warm start, ICC 0.71)": the seed-level and warm-start-level 95 %
    half-widths of one arm's endpoint mean."""
    if not stat:
        return ""
    seed = (S.as_float(stat.get("seed_ci_high")) - S.as_float(stat.get("seed_ci_low"))) / 2
    warm = (S.as_float(stat.get("ci_high")) - S.as_float(stat.get("ci_low"))) / 2
    return (f"{S.as_float(stat.get('mean')):.3f} ± {seed:.3f} (± {warm:.3f} by warm start, "
            f"ICC {S.as_float(stat.get('icc')):.2f})")


def arms_table(plan: StudyPlan, rates: Sequence[Rate]) -> str:
    """Each arm's endpoint at each rate: mean ± the seed-level half-width, then the warm-start level's
    (W − 1 degrees of freedom) and the ICC (docs/studies.md)."""
    header = ["Arm", *(r.label for r in rates)]
    body = [[arm, *(_arm_cell(r.arms.get(arm)) if r.ran else NOT_RUN for r in rates)] for arm in plan.arms]
    return W.md_table(header, body)


def compare_report(rates: Sequence[Rate]) -> tuple[dict[str, Any], str]:
    """(compare.json, compare.md) of the rates."""
    plan = next(r.plan for r in rates if r.plan is not None)
    line = headline(rates)
    tables = {c.label: [_row(rate, c.label) for rate in rates] for c in plan.family}
    test = "paired t by seed" if plan.test == "paired" else "Welch"
    names = ", ".join(dict.fromkeys(r.plan.name for r in rates if r.plan is not None))
    parts = [f"# Across learning rates: {names}\n", f"{line}\n",
             f"Each table: one comparison of the plans' Holm family ({len(plan.family)} comparisons, "
             f"{test}, equivalence margin "
             f"±{100 * plan.margin:g} points) at each learning rate; the gap in points with its 95 % {test} "
             f"interval and the plan's verdict (Holm within each study), then the mixed model with warm start "
             f"a random effect (secondary; docs/studies.md). A study not run yet, or only in part, is {NOT_RUN!r}.\n"]
    header = ["Learning rate", "Seeds", f"Gap, points [95 % {test} CI]", "Verdict (plan's test)",
              "Gap, mixed model [95 % CI]", "Verdict under the mixed model (secondary)"]
    for label, rows in tables.items():
        parts += [f"## {label}\n", W.md_table(header, _md_rows(rows))]
    parts += [f"## Each arm's {plan.endpoint}\n",
              "Mean ± half-width of its 95 % interval over the seeds, then over the warm starts (the seeds of a "
              "warm start averaged first: W − 1 degrees of freedom), and the share of the variance between "
              "warm starts (ICC).\n", arms_table(plan, rates)]
    summary = {"plan": plan.name, "margin": plan.margin, "headline": line,
               "arms": {r.label: r.arms for r in rates if r.ran},
               "folders": [{"folder": str(r.folder), "rate": r.label, "lr": r.lr,
                            "status": "run" if r.ran else NOT_RUN, "note": r.note, "n_runs": r.n_runs}
                           for r in rates],
               "comparisons": tables}
    return summary, "\n".join(parts)


def write_compare(folders: Sequence[str | Path], out: str | Path) -> dict[str, Any]:
    """Read the folders, write OUT/compare.md and OUT/compare.json, return the json's dict."""
    summary, text = compare_report(read_rates(folders))
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = R._jsonable(summary)
    R._write_atomic(out / "compare.json", json.dumps(summary, indent=2, allow_nan=False) + "\n")
    R._write_atomic(out / "compare.md", text)
    return summary
