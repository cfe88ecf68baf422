"""Paired comparison of two arms run on the same seeds, for `python -m benchmarks` reports.

When both arms of a comparison train with the same seeds, much of the seed-to-seed spread (the
initial weights, the prompt order) is shared by the two runs of a seed; the t test of the per-seed
differences removes it, where Welch's test (benchmarks.bench.stats) counts it as noise. Pairing is by
position: the caller aligns the two lists by seed. The dicts have welch()'s keys, so
stats.verdicts_within Holm-adjusts a family of them exactly as it does a family of Welch comparisons.
Kept apart from stats.py only to keep that file under 500 lines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
from scipy.stats import t as _t

from .stats import CONFIDENCE, _check_confidence, _t_p, as_float, min_detectable_diff

__all__ = ["compare_paired", "paired", "paired_p", "paired_tost_p"]


def _paired_parts(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mean of a − b, its standard error, n − 1) along the last axis of NaN-free arrays of the same
    shape (..., n), n >= 2 pairs. Differences without spread give df = NaN, as stats._welch_parts
    does for arms without spread, so that a constant difference is "no test" rather than p = 0."""
    if a.shape != b.shape:
        raise ValueError(f"paired: values and reference differ in shape {a.shape} vs {b.shape}; align them by seed")
    d = a - b
    n = d.shape[-1]
    se = d.std(axis=-1, ddof=1) / math.sqrt(n)
    return d.mean(axis=-1), se, np.where(se > 0, n - 1.0, np.nan)


def paired_p(a: np.ndarray, b: np.ndarray, shift: float = 0.0, alternative: str = "two-sided") -> np.ndarray:
    """Paired t-test p-value of H0: mean(a − b) = ``shift``, pairing a and b by position along the last
    axis (vectorised like stats.welch_p, for calibrations); equals scipy.stats.ttest_rel."""
    return _t_p(*_paired_parts(np.asarray(a, float), np.asarray(b, float)), shift, alternative)


def paired_tost_p(a: np.ndarray, b: np.ndarray, margin: float) -> np.ndarray:
    """Two one-sided paired t tests of equivalence within ±``margin``: the larger of the p-values of
    H0: mean(a − b) <= −margin and H0: mean(a − b) >= +margin; vectorised like paired_p."""
    if not margin > 0:
        raise ValueError(f"margin: must be > 0, got {margin}")
    return np.maximum(paired_p(a, b, -margin, "greater"), paired_p(a, b, margin, "less"))


def _pairs(values: Iterable[Any], reference: Iterable[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The complete pairs of two equally long, position-aligned sequences as two float arrays: a pair
    with a missing side (NaN, None, inf) is dropped whole, since its other side has no partner."""
    a = np.array([as_float(v) for v in values], dtype=float)
    b = np.array([as_float(v) for v in reference], dtype=float)
    if a.size != b.size:
        raise ValueError(f"paired: values and reference differ in length ({a.size} vs {b.size}); align them by seed")
    keep = np.isfinite(a) & np.isfinite(b)
    return a[keep], b[keep]


def paired(values: Iterable[Any], reference: Iterable[Any], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Paired comparison of two arms run on the same seeds, paired by position (the caller aligns them
    by seed): the t test and t interval of the differences values[i] − reference[i]. Same keys as
    stats.welch(): "mean", "ci_low", "ci_high", "p", "mde" (min_detectable_diff(paired=True) from the
    SD of the differences, at two-sided ALPHA until verdicts_within makes it Holm-consistent), "n_a" =
    "n_b" = the number of complete pairs, and "test": "paired". Below two pairs the interval collapses
    to the difference and p, mde are NaN; differences without spread give no p (as in welch).
    ValueError when the two lists differ in length."""
    _check_confidence(confidence)
    a, b = _pairs(values, reference)
    out = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "p": math.nan, "mde": math.nan,
           "n_a": int(a.size), "n_b": int(b.size), "test": "paired"}
    if a.size == 0:
        return out
    diff = float((a - b).mean())
    out.update(mean=diff, ci_low=diff, ci_high=diff)
    if a.size < 2:
        return out
    _, se, _ = _paired_parts(a, b)
    if float(se) > 0:
        half = float(_t.ppf((1.0 + confidence) / 2.0, a.size - 1) * se)
        out.update(ci_low=diff - half, ci_high=diff + half, p=float(paired_p(a, b)))
    out["mde"] = min_detectable_diff(a.size, b.size, float((a - b).std(ddof=1)), paired=True)
    return out


def compare_paired(values: Iterable[Any], reference: Iterable[Any], margin: float) -> dict[str, Any]:
    """paired() plus "p_tost" (paired TOST within ±``margin``, NaN below two pairs) and "margin": the
    seed-aligned counterpart of stats.compare_arms, Holm-adjusted by stats.verdicts_within the same way."""
    out = paired(values, reference)
    a, b = _pairs(values, reference)
    out.update(p_tost=float(paired_tost_p(a, b, margin)) if a.size >= 2 else math.nan, margin=margin)
    return out
