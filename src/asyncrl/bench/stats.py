"""Small statistics helpers for `asyncrl bench` reports.

Benchmarks run a handful of seeds per method, so every headline number is a mean over seeds
with a percentile-bootstrap confidence interval. Everything here is plain numpy, deterministic
(fixed seeds) and tolerant of missing data: NaN/None/inf values are dropped before anything
is computed, because a run that crashed or a metric a method does not log must not poison the
aggregate.

The lower half reads the `runs` of a bench results.json (run dicts with "method", "summary"
and per-step "metrics"): per-run values, grouping by method, and the per-method aggregate that
summary.json reports.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

__all__ = ["STEP_METRICS", "SUMMARY_METRICS", "aggregate_methods", "as_float", "bootstrap_ci",
           "eval_records", "finite", "group_by_method", "mean_curve", "method_curves", "ordered",
           "run_value", "seed_stat", "wall_time_key"]

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

# Upper bound on the number of floats materialised at once by the vectorised bootstrap
# (rows x n_boot x n); keeps memory around 32 MB however long the curves are.
_MAX_BOOT_FLOATS = 4_000_000


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


def _check_args(confidence: float, n_boot: int) -> None:
    """Validate bootstrap parameters; raises ValueError on nonsense rather than returning junk."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")


def _bootstrap_rows(data: np.ndarray, confidence: float, n_boot: int, seed: int
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Percentile bootstrap of the mean for each row of a NaN-free (rows, n) matrix.

    Takes `data` of shape (rows, n) with n >= 1 and returns (mean, low, high), each of shape
    (rows,). One (n_boot, n) index matrix is drawn and shared by all rows: rows are
    independent quantities (e.g. different steps), so sharing resamples is harmless and makes
    the whole computation a single fancy-indexing op per chunk.
    """
    rows, n = data.shape
    mean = data.mean(axis=1)
    lo_b, hi_b = data.min(axis=1), data.max(axis=1)
    if n == 1:
        return mean, mean.copy(), mean.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.empty(rows), np.empty(rows)
    chunk = max(1, _MAX_BOOT_FLOATS // (n_boot * n))
    for start in range(0, rows, chunk):
        part = data[start:start + chunk]
        boot_means = part[:, idx].mean(axis=2)  # (chunk, n_boot)
        q = np.quantile(boot_means, [alpha, 1.0 - alpha], axis=1)
        low[start:start + chunk], high[start:start + chunk] = q[0], q[1]
    # The percentile interval brackets the sample mean in exact arithmetic for any sensible
    # n_boot, but float rounding (the same numbers summed in a different order) can put it one
    # ulp outside, or put a mean of identical values one ulp off them. Clamp so the documented
    # invariants min <= low <= mean <= high <= max hold exactly.
    mean = np.clip(mean, lo_b, hi_b)
    low = np.clip(np.minimum(low, mean), lo_b, hi_b)
    high = np.clip(np.maximum(high, mean), lo_b, hi_b)
    return mean, low, high


def bootstrap_ci(values: Iterable[Any] | np.ndarray, *, confidence: float = 0.95,
                 n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile-bootstrap confidence interval of the mean.

    Takes a 1-D collection of numbers (non-finite entries and None are dropped), the two-sided
    `confidence` level, the number of bootstrap resamples and the RNG seed (fixed so reports are
    reproducible). Returns (mean, low, high) as Python floats:
    - no finite values  -> (nan, nan, nan);
    - one finite value v -> (v, v, v) (a zero-width interval: there is no spread to resample);
    - otherwise the (1-confidence)/2 and (1+confidence)/2 quantiles of `n_boot` resampled means,
      guaranteed to satisfy min(values) <= low <= mean <= high <= max(values).
    The index matrix is drawn once (n_boot x n), so memory is O(n_boot * n).
    """
    _check_args(confidence, n_boot)
    arr = finite(values)
    if arr.size == 0:
        return (math.nan, math.nan, math.nan)
    mean, low, high = _bootstrap_rows(arr[None, :], confidence, n_boot, seed)
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
               x: str = "step", *, confidence: float = 0.95, n_boot: int = 2_000, seed: int = 0
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
    percentile-bootstrap CI of the mean (`confidence`, `n_boot`) where >= 2 seeds have a value,
    and the min/max over seeds otherwise (which, for a single seed, is the value itself: a
    zero-width band). All four arrays are empty when no run has the metric.
    """
    _check_args(confidence, n_boot)
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
    # finite values are exactly those values; group rows by `c` to bootstrap them in one go.
    compact = np.sort(ys, axis=1)
    for c in np.unique(counts):
        rows = np.flatnonzero(counts == c)
        if c == 0 or rows.size == 0:
            continue
        data = compact[rows, :c]
        if c >= 2:
            m, lo, hi = _bootstrap_rows(data, confidence, n_boot, seed)
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
    """{"mean", "ci_low", "ci_high", "n"} of `values` across seeds (n counts finite values)."""
    mean, low, high = bootstrap_ci(values)
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


def diff_ci(values: Iterable[Any], reference: Iterable[Any], *, confidence: float = 0.95,
            n_boot: int = 10_000, seed: int = 0) -> tuple[float, float, float]:
    """Mean difference mean(values) − mean(reference) of two independent samples (seeds of two
    arms) with its percentile-bootstrap CI, each sample resampled on its own.

    Returns (diff, low, high); NaNs when either sample has no finite value. A CI entirely below 0
    says the first arm ends lower than the reference beyond the seed spread."""
    _check_args(confidence, n_boot)
    a, b = finite(values), finite(reference)
    if a.size == 0 or b.size == 0:
        return (math.nan, math.nan, math.nan)
    rng = np.random.default_rng(seed)
    boot = (a[rng.integers(0, a.size, size=(n_boot, a.size))].mean(axis=1)
            - b[rng.integers(0, b.size, size=(n_boot, b.size))].mean(axis=1))
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(boot, [alpha, 1.0 - alpha])
    diff = float(a.mean() - b.mean())
    return (diff, float(min(low, diff)), float(max(high, diff)))
