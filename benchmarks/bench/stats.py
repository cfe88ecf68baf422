"""Small statistics helpers for `python -m benchmarks` reports.

Benchmarks run a handful of seeds per method (3-10), so every headline number is a mean over
seeds with a Student-t confidence interval, and every comparison of two arms is a Welch test
(the tests live in the last section; benchmarks.bench.paired has the paired test for arms run on
the same seeds). Nothing resamples: the numbers are the same on every
render. Missing data is tolerated: NaN/None/inf values are dropped before anything is computed,
because a run that crashed or a metric a method does not log must not poison the aggregate.

The lower half reads the `runs` of a bench results.json (run dicts with "method", "summary"
and per-step "metrics"): per-run values, grouping by method, and the per-method aggregate that
summary.json reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.special import roots_jacobi
from scipy.stats import nct as _nct
from scipy.stats import t as _t

__all__ = ["STEP_METRICS", "SUMMARY_METRICS", "aggregate_methods", "as_float", "compare_arms", "eval_records",
           "finite", "group_by_method", "holm", "mean_ci", "mean_curve", "method_curves", "min_detectable_diff",
           "ordered", "run_value", "seed_stat", "tost_p", "verdict", "verdicts_within", "wall_time_key",
           "welch", "welch_p"]

# Special `x` name for mean_curve: cumulative per-step training time (see _run_points).
wall_time_key = "wall_time"

# Per-run scalars read from each run's summary, aggregated across seeds by aggregate_methods.
SUMMARY_METRICS = ("final_eval_reward", "initial_eval_reward", "train_wall_s", "wall_time_s",
                   "time_per_step_s", "gen_time_per_step_s", "train_time_per_step_s",
                   "prox_time_per_step_s", "samples_per_s", "weight_publish_per_step_s",
                   "weight_pull_per_step_s", "gen_tokens_per_s", "final_eval_answer_acc")
# Per-step metrics: each run contributes its mean over steps, then runs are aggregated.
STEP_METRICS = ("importance_weight_max", "importance_weight_min", "clipped_tokens", "entropy",
                "ess_frac", "staleness_token_mean", "prox_abs_err_mean", "prox_abs_err_max")

CONFIDENCE = 0.95


def as_float(value: Any) -> float:
    """Float of a JSON value; None, booleans, strings and anything non-numeric become NaN."""
    try:
        return math.nan if value is None or isinstance(value, bool) else float(value)
    except (TypeError, ValueError):
        return math.nan


def finite(values: Iterable[Any] | np.ndarray) -> np.ndarray:
    """Return the finite entries of `values` as a flat float64 array.

    Takes any iterable of numbers (None is accepted and treated as missing) and returns a 1-D
    array with every NaN, None and +/-inf removed.
    """
    arr = values if isinstance(values, np.ndarray) else np.asarray(list(values), dtype=float)
    arr = np.asarray(arr, dtype=float).ravel()
    return arr[np.isfinite(arr)]


def _check_confidence(confidence: float) -> None:
    """Refuse a confidence level outside (0, 1) rather than return junk."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")


def _t_rows(data: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean and t interval of the mean for each row of a NaN-free (rows, n) matrix, n >= 2.

    Returns (mean, low, high), each of shape (rows,): mean ± t_{(1+c)/2, n−1} · s / √n, exact for
    normal data at any n (no resampling, so nothing depends on an RNG seed)."""
    n = data.shape[1]
    mean = data.mean(axis=1)
    half = _t.ppf((1.0 + confidence) / 2.0, n - 1) * data.std(axis=1, ddof=1) / math.sqrt(n)
    return mean, mean - half, mean + half


def mean_ci(values: Iterable[Any] | np.ndarray, *, confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Mean and Student-t confidence interval of the mean over seeds.

    Takes a 1-D collection of numbers (non-finite entries and None are dropped) and the two-sided
    `confidence`. Returns (mean, low, high) as floats: (nan, nan, nan) without a finite value;
    (v, v, v) for one value (no spread to estimate: callers check n before claiming anything);
    otherwise mean ± t_{(1+c)/2, n−1} · s / √n. At n = 3 the t quantile is 4.30, not the 1.96 a
    normal or bootstrap interval effectively uses, which is what keeps coverage at 95 % there."""
    _check_confidence(confidence)
    arr = finite(values)
    if arr.size == 0:
        return (math.nan, math.nan, math.nan)
    if arr.size == 1:
        return (float(arr[0]),) * 3
    mean, low, high = _t_rows(arr[None, :], confidence)
    return (float(mean[0]), float(low[0]), float(high[0]))


def _records(run: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Sequence[Mapping[str, Any]]:
    """Per-step records of a run: run["metrics"] for a run dict, or the sequence itself."""
    if isinstance(run, Mapping):
        return run.get("metrics") or []
    return run




def _run_points(records: Sequence[Mapping[str, Any]], key: str, x: str) -> dict[float, tuple[float, float]]:
    """Map step -> (x value, metric value) for one run, keeping only finite metric values.

    Takes the run's per-step records, the metric `key` and the x-axis name; returns a dict keyed
    by step number. For x == "wall_time" the x value is the cumulative sum of `step_time_s`
    (which excludes evaluation time, so async and sync runs are compared on training time);
    if any record lacks a finite step_time_s the run falls back to its `elapsed_s` column,
    since a cumulative sum with holes would silently under-count.
    """
    recs = sorted((r for r in records if math.isfinite(as_float(r.get("step")))),
                     key=lambda r: as_float(r.get("step")))
    if x == wall_time_key:
        # step 0 (the evaluation before training) took no training time
        step_times = np.array([0.0 if as_float(r.get("step")) == 0 else as_float(r.get("step_time_s"))
                               for r in recs])
        if step_times.size and np.isfinite(step_times).all():
            xs = np.cumsum(step_times)
        else:
            xs = np.array([as_float(r.get("elapsed_s")) for r in recs])
    else:
        xs = np.array([as_float(r.get(x)) for r in recs])
    out: dict[float, tuple[float, float]] = {}
    for rec, xv in zip(recs, xs, strict=True):
        yv = as_float(rec.get(key))
        if math.isfinite(yv):
            out[as_float(rec["step"])] = (float(xv), yv)
    return out


def mean_curve(runs: Sequence[Mapping[str, Any] | Sequence[Mapping[str, Any]]], key: str,
               x: str = "step", *, confidence: float = CONFIDENCE
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Align one metric across seeds by step number and average it.

    Takes `runs` (run dicts with a "metrics" list, or plain lists of per-step records, one per
    seed), the metric `key` and the x-axis: a record key ("step", "elapsed_s", ...) or
    "wall_time" (cumulative `step_time_s`, falling back to `elapsed_s`). Series are matched on
    the record's "step" value, not on list position, so a seed that skipped or lost a step does
    not shift the others. The output covers the union of steps where at least one seed has a
    finite value; each point uses the seeds available there.

    Returns (x, mean, low, high) as float arrays of equal length, sorted by step. x is the mean
    over seeds of the x value at that step (just the step for x="step"). The band is the
    t interval of the mean (`confidence`, as mean_ci) where >= 2 seeds have a value,
    and the min/max over seeds otherwise (which, for a single seed, is the value itself: a
    zero-width band). All four arrays are empty when no run has the metric.
    """
    _check_confidence(confidence)
    series = [s for s in (_run_points(_records(r), key, x) for r in runs) if s]
    steps = sorted(set().union(*series)) if series else []
    empty = np.array([], dtype=float)
    if not steps:
        return empty, empty.copy(), empty.copy(), empty.copy()
    xs = np.full((len(steps), len(series)), np.nan)
    ys = np.full_like(xs, np.nan)
    pos = {s: i for i, s in enumerate(steps)}
    for j, pts in enumerate(series):
        for step, (xv, yv) in pts.items():
            xs[pos[step], j], ys[pos[step], j] = xv, yv
    counts = np.isfinite(ys).sum(axis=1)
    mean, low, high = (np.full(len(steps), np.nan) for _ in range(3))
    # np.sort moves NaNs to the end of each row, so the first `c` columns of rows with `c`
    # finite values are exactly those values; group rows by `c` to compute their intervals in one go.
    compact = np.sort(ys, axis=1)
    for c in np.unique(counts):
        rows = np.flatnonzero(counts == c)
        if c == 0 or rows.size == 0:
            continue
        data = compact[rows, :c]
        if c >= 2:
            m, lo, hi = _t_rows(data, confidence)
        else:
            m, lo, hi = data.mean(axis=1), data.min(axis=1), data.max(axis=1)
        mean[rows], low[rows], high[rows] = m, lo, hi
    with np.errstate(invalid="ignore"):
        x_out = np.array([np.nanmean(row) if np.isfinite(row).any() else np.nan for row in xs])
    if x == "step":
        x_out = np.asarray(steps, dtype=float)
    return x_out, mean, low, high


def eval_records(run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Eval curve of a run as step records {"step", "eval_reward"}, ready for mean_curve.

    Takes a results.json run dict; uses summary.eval_history ([[step, reward], ...]) and falls
    back to the per-step records carrying eval_reward when the history is absent."""
    hist = (run.get("summary") or {}).get("eval_history")
    if hist:
        return [{"step": p[0], "eval_reward": p[1]} for p in hist if len(p) >= 2]
    return [r for r in run.get("metrics") or [] if "eval_reward" in r]


def method_curves(groups: Mapping[str, Sequence[Mapping[str, Any]]], key: str, x: str = "step"
                  ) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
    """mean_curve of `key` for each method.

    Takes {method: [run dicts, one per seed]}, the metric key and the x axis (as mean_curve);
    key "eval_reward" reads each run's eval history (eval_records) rather than the step
    records, since evaluation runs on its own schedule. Returns {method: (x, mean, low, high)}."""
    if key == "eval_reward":
        return {m: mean_curve([eval_records(r) for r in runs], key, x) for m, runs in groups.items()}
    return {m: mean_curve(runs, key, x) for m, runs in groups.items()}


# ---- Aggregation of results.json runs across seeds -------------------------------------------


def run_value(run: Mapping[str, Any], metric: str) -> float:
    """One run's value of `metric`: its summary entry, or the mean over steps of a step metric.

    Returns NaN when the run lacks the metric (missing key, no finite step values)."""
    if metric in STEP_METRICS:
        vals = finite(as_float(r.get(metric)) for r in run.get("metrics") or [])
        return float(vals.mean()) if vals.size else math.nan
    return as_float((run.get("summary") or {}).get(metric))


def seed_stat(values: Sequence[float]) -> dict[str, float]:
    """{"mean", "ci_low", "ci_high", "n"} of `values` across seeds: the t interval of mean_ci
    (n counts finite values)."""
    mean, low, high = mean_ci(values)
    return {"mean": mean, "ci_low": low, "ci_high": high, "n": int(finite(values).size)}


def ordered(names: Sequence[str], order: Sequence[str] = ()) -> list[str]:
    """Unique `names` with the preferred `order` first, the rest alphabetically."""
    present = set(names)
    return [m for m in order if m in present] + sorted(present - set(order))


def group_by_method(runs: Sequence[Mapping[str, Any]], order: Sequence[str] = ()) -> dict[str, list]:
    """Group runs by their "method", keys in display order."""
    groups = {m: [] for m in ordered([str(r.get("method")) for r in runs], order)}
    for run in runs:
        groups[str(run.get("method"))].append(run)
    return groups


def aggregate_methods(runs: Sequence[Mapping[str, Any]], order: Sequence[str] = ()) -> dict:
    """Aggregate every summary and step metric across the seeds of each method.

    Takes the run dicts of results.json and an optional preferred method order; returns
    {method: {metric: {"mean", "ci_low", "ci_high", "n"}}} for SUMMARY_METRICS + STEP_METRICS
    (NaN where no seed logged the metric)."""
    return {m: {k: seed_stat([run_value(r, k) for r in group]) for k in SUMMARY_METRICS + STEP_METRICS}
            for m, group in group_by_method(runs, order).items()}

# ---- Two arms: Welch or paired test, equivalence (TOST), detectable difference, Holm ---------

ALPHA = 0.05
POWER = 0.80
# Gauss–Jacobi nodes of the exact Welch power (_welch_power): 64 agree with 128 to 1e-6 even at two
# seeds a side, where the quadrature weight is singular at both ends and 32 nodes were off by 1e-3.
_JACOBI_NODES = 64


def _welch_parts(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean(a) − mean(b), its standard error, Welch–Satterthwaite degrees of freedom) along the last
    axis of NaN-free arrays a (..., n_a) and b (..., n_b), n_a, n_b >= 2; shapes (...). Both arms
    without spread give se = 0 and df = NaN, so every p-value built on them is NaN (no test)."""
    n_a, n_b = a.shape[-1], b.shape[-1]
    v_a, v_b = a.var(axis=-1, ddof=1) / n_a, b.var(axis=-1, ddof=1) / n_b
    se = np.sqrt(v_a + v_b)
    with np.errstate(invalid="ignore", divide="ignore"):
        df = (v_a + v_b) ** 2 / (v_a ** 2 / (n_a - 1) + v_b ** 2 / (n_b - 1))
    return a.mean(axis=-1) - b.mean(axis=-1), se, df


def _t_p(diff: np.ndarray, se: np.ndarray, df: np.ndarray, shift: float, alternative: str) -> np.ndarray:
    """p-value of H0: difference = shift from a t statistic (diff − shift) / se with df degrees of freedom."""
    with np.errstate(invalid="ignore", divide="ignore"):
        stat = (diff - shift) / se
    if alternative == "two-sided":
        return 2.0 * _t.sf(np.abs(stat), df)
    if alternative == "less":
        return _t.cdf(stat, df)
    if alternative == "greater":
        return _t.sf(stat, df)
    raise ValueError(f"alternative: must be two-sided, less or greater, got {alternative!r}")


def welch_p(a: np.ndarray, b: np.ndarray, shift: float = 0.0, alternative: str = "two-sided") -> np.ndarray:
    """Welch t-test p-value of H0: mean(a) − mean(b) = ``shift``, along the last axis (vectorised, so a
    calibration can test thousands of simulated pairs at once). ``alternative``: "two-sided", "less"
    (H1: difference < shift) or "greater"; equals scipy.stats.ttest_ind(equal_var=False)."""
    return _t_p(*_welch_parts(np.asarray(a, float), np.asarray(b, float)), shift, alternative)


def tost_p(a: np.ndarray, b: np.ndarray, margin: float) -> np.ndarray:
    """Two one-sided Welch tests of equivalence within ±``margin``: the larger of the p-values of
    H0: diff <= −margin and H0: diff >= +margin. p < alpha says |mean(a) − mean(b)| < margin at level
    alpha; vectorised along the last axis like welch_p (benchmarks.bench.paired has the paired one)."""
    if not margin > 0:
        raise ValueError(f"margin: must be > 0, got {margin}")
    return np.maximum(welch_p(a, b, -margin, "greater"), welch_p(a, b, margin, "less"))


def _welch_power(nc: float, n_a: int, n_b: int, alpha: float) -> float:
    """Exact power of the two-sided Welch test at ``alpha`` for normal arms with a common SD and a true
    difference of nc · SD · √(1/n_a + 1/n_b), counting rejections of the right sign only (one of the
    wrong sign detects nothing; at the MDE its chance is below 1e-6, and scipy's nct returns NaN for it
    at large nc).

    Why exact: the sample variances are SD²·u/(n_a−1) and SD²·v/(n_b−1) with u, v independent
    chi-squares, so W = u + v ~ χ²(n_a+n_b−2) and the share B = u / W ~ Beta((n_a−1)/2, (n_b−1)/2)
    are independent. Welch's df depends on B alone and its standard error is SD·√W·g(B), so given B
    the test rejects when a noncentral t(n_a+n_b−2, nc) exceeds h(B); Gauss–Jacobi quadrature averages
    over B. The usual shortcut (t_{1−α/2}+t_{power}, pooled df) overstates Welch's power at 3-5 seeds:
    tests/bench/test_calibration.py measures both."""
    ka, kb = n_a - 1, n_b - 1
    x, w = roots_jacobi(_JACOBI_NODES, kb / 2 - 1, ka / 2 - 1)
    share = (1.0 + x) / 2.0
    v_a, v_b = share / (ka * n_a), (1.0 - share) / (kb * n_b)  # each arm's s²/n in units of SD²·W
    df = (v_a + v_b) ** 2 / (v_a ** 2 / ka + v_b ** 2 / kb)
    h = _t.ppf(1.0 - alpha / 2.0, df) * np.sqrt((v_a + v_b) * (ka + kb) / (1.0 / n_a + 1.0 / n_b))
    return float((w / w.sum()) @ _nct.sf(h, ka + kb, nc))


@lru_cache(maxsize=512)
def _mde_unit(test: str, n_a: int, n_b: int, alpha: float, power: float) -> float:
    """MDE in units of the SD ("welch": the common SD of the arms; "paired": the SD of the n_a = n_b
    differences): the noncentrality at which the exact power reaches ``power``, times the standard
    error per unit SD. Cached: verdicts_within asks for the same few (n_a, n_b, alpha) over and over."""
    if not alpha / 2.0 < power < 1.0:
        raise ValueError(f"power: must be in (alpha/2, 1), got {power}")
    if test == "paired":
        crit = _t.ppf(1.0 - alpha / 2.0, n_a - 1)
        power_at, se_unit = (lambda nc: float(_nct.sf(crit, n_a - 1, nc))), 1.0 / math.sqrt(n_a)
    else:
        power_at, se_unit = (lambda nc: _welch_power(nc, n_a, n_b, alpha)), math.sqrt(1.0 / n_a + 1.0 / n_b)
    high = 1.0
    while power_at(high) < power:  # power rises to 1 with nc, so doubling brackets the root
        high *= 2.0
    return float(brentq(lambda nc: power_at(nc) - power, 0.0, high, xtol=1e-10)) * se_unit


def min_detectable_diff(n_a: int, n_b: int, sd: float, *, alpha: float = ALPHA, power: float = POWER,
                        paired: bool = False) -> float:
    """Smallest true difference that the two-sided test at ``alpha`` detects (rejects, with the right
    sign) with probability ``power`` on normal data: Welch's test of arms of n_a and n_b seeds with
    common SD ``sd`` (the pooled SD), or with ``paired`` the paired t test of n_a = n_b pairs whose
    differences have SD ``sd``. Exact (_welch_power; the noncentral t for paired), not the
    (t_{1−α/2}+t_{power})·SE shortcut, which at 3 seeds promises 80 % and delivers ~70 % or less.
    NaN with fewer than 2 seeds (pairs) a side."""
    if min(n_a, n_b) < 2 or not math.isfinite(sd):
        return math.nan
    if paired and n_a != n_b:
        raise ValueError(f"paired: needs as many pairs on both sides, got {n_a} and {n_b}")
    return float(sd * _mde_unit("paired" if paired else "welch", int(n_a), int(n_b), float(alpha), float(power)))


def welch(values: Iterable[Any], reference: Iterable[Any], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Welch comparison of two arms' seeds: {"mean": mean(values) − mean(reference), "ci_low", "ci_high"
    (the Welch t interval of that difference), "p" (two-sided Welch p), "mde" (min_detectable_diff at
    two-sided ALPHA from the pooled SD; verdicts_within makes it Holm-consistent), "n_a", "n_b",
    "test": "welch"}. With fewer than two finite seeds on either side the interval collapses to the
    difference and p, mde are NaN: one seed has no spread to test against."""
    _check_confidence(confidence)
    a, b = finite(values), finite(reference)
    out = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "mde": math.nan,
           "n_a": int(a.size), "n_b": int(b.size), "test": "welch"}
    if a.size == 0 or b.size == 0:
        return out
    diff = float(a.mean() - b.mean())
    out.update(mean=diff, ci_low=diff, ci_high=diff)
    if min(a.size, b.size) < 2:
        return out
    _, se, df = _welch_parts(a, b)
    if float(se) > 0:
        half = float(_t.ppf((1.0 + confidence) / 2.0, df) * se)
        out.update(ci_low=diff - half, ci_high=diff + half, p=float(welch_p(a, b)))
    pooled = math.sqrt(((a.size - 1) * a.var(ddof=1) + (b.size - 1) * b.var(ddof=1)) / (a.size + b.size - 2))
    out["mde"] = min_detectable_diff(a.size, b.size, pooled)
    return out


def compare_arms(values: Iterable[Any], reference: Iterable[Any], margin: float) -> dict[str, Any]:
    """welch() plus "p_tost" (equivalence within ±``margin``, NaN below two seeds a side) and "margin";
    the verdict needs the table's Holm adjustment, so verdicts_within adds it."""
    out = welch(values, reference)
    a, b = finite(values), finite(reference)
    tested = min(a.size, b.size) >= 2
    out.update(p_tost=float(tost_p(a, b, margin)) if tested else math.nan, margin=margin)
    return out


def final_reward_gap(groups: Mapping[str, Sequence[Mapping[str, Any]]], a: str, b: str,
                     margin: float) -> dict[str, Any] | None:
    """compare_arms of final eval reward, arm ``a`` − arm ``b`` over their seeds, the differences
    (mean, ci_low, ci_high, mde, margin) in points; None when an arm is missing or the gap is not
    finite. The verdict needs the table's Holm adjustment (verdicts_within)."""
    if a not in groups or b not in groups:
        return None
    gap = compare_arms([run_value(r, "final_eval_reward") for r in groups[a]],
                       [run_value(r, "final_eval_reward") for r in groups[b]], margin)
    for key in ("mean", "ci_low", "ci_high", "mde", "margin"):
        gap[key] = 100 * gap[key]
    return gap if math.isfinite(gap["mean"]) else None


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm step-down adjustment of a family of p-values (NaNs stay NaN and are not counted):
    the i-th smallest of m becomes max over j <= i of min(1, (m − j + 1) · p_(j)). Rejecting
    where the adjusted p < alpha keeps the chance of any false "differs" in the family <= alpha."""
    p = np.asarray(p_values, dtype=float)
    out = np.full(p.shape, np.nan)
    idx = np.flatnonzero(np.isfinite(p))
    order = idx[np.argsort(p[idx], kind="stable")]
    m, running = order.size, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out.tolist()


def verdict(p_holm: float, p_tost: float, alpha: float = ALPHA) -> str:
    """"differs" (Holm-adjusted p < alpha), "equivalent" (TOST p < alpha) or "undecided"
    (neither, or no test: NaN p-values)."""
    if p_holm < alpha:
        return "differs"
    if p_tost < alpha:
        return "equivalent"
    return "undecided"


def _holm_mde_factor(comp: Mapping[str, Any], level: float) -> float:
    """MDE at two-sided ``level`` over the MDE at ALPHA (what welch and paired.paired report) for the
    comparison's test and arm sizes: the MDE is SD times a function of (n_a, n_b, alpha), so the ratio
    rescales an MDE in any unit without the raw data. NaN without two seeds a side."""
    n_a, n_b = as_float(comp.get("n_a")), as_float(comp.get("n_b"))
    if not min(n_a, n_b) >= 2:
        return math.nan
    test = "paired" if comp.get("test") == "paired" else "welch"
    return _mde_unit(test, int(n_a), int(n_b), level, POWER) / _mde_unit(test, int(n_a), int(n_b), ALPHA, POWER)


def verdicts_within(comparisons: Sequence[dict[str, Any]], alpha: float = ALPHA) -> None:
    """Holm-adjust the "p" of one table's comparisons together, in place, and set each one's "p_holm",
    "verdict" and a Holm-consistent "mde".

    A family is compare_arms (Welch) or paired.compare_paired dicts, one kind or the other; the
    correction is the same. "mde" becomes the MDE at Holm's first step, two-sided alpha/m with m the
    number of finite p-values in the family: the smallest true difference that Holm calls "differs"
    with >= 80 % power even when it is the only true effect in the family. alpha/m is exact for the
    comparison with the smallest p and conservative otherwise (later steps test at alpha/(m−1), ...),
    and a p < alpha/m is rejected at any rank, because every smaller p is below alpha/m too. The
    two-sided-ALPHA MDE that welch/paired report, with far less than 80 % power under Holm, stays as
    "mde_unadjusted". The rescaling needs only "test", "n_a" and "n_b", so an "mde" a caller already
    put in points stays in points, and a second call on the same family changes nothing."""
    p_values = [as_float(c.get("p")) for c in comparisons]
    m = max(1, sum(math.isfinite(p) for p in p_values))
    for comp, p_adj in zip(comparisons, holm(p_values), strict=True):
        comp["p_holm"] = p_adj
        comp["verdict"] = verdict(p_adj, as_float(comp.get("p_tost")), alpha)
        comp["mde_unadjusted"] = base = as_float(comp.get("mde_unadjusted", comp.get("mde")))
        comp["mde"] = base * _holm_mde_factor(comp, alpha / m) if math.isfinite(base) else base
