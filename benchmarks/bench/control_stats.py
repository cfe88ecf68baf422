"""Robust aggregate statistics for the control study (Agarwal et al. 2021, "Deep RL at the edge of the
statistical precipice"), in numpy: min-max normalised scores, the interquartile mean (IQM), stratified
bootstrap confidence intervals and performance profiles.

Stratified bootstrap: a replicate resamples the runs *within each env* with replacement (envs are the
strata, so every replicate keeps every env's weight), then recomputes the statistic over the pooled
runs; the CI is the percentile interval of the replicates.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy.stats import trim_mean

N_BOOT = 2000
CONFIDENCE = 0.95


def iqm(scores: np.ndarray, axis: int = -1) -> np.ndarray | float:
    """Interquartile mean: the mean of the middle 50 % (25 % trimmed from each end) along ``axis``."""
    return trim_mean(scores, 0.25, axis=axis)


def min_max_normalise(score: float, low: float, high: float) -> float:
    """(score − low) / (high − low); 0 when every run of the env scored the same."""
    return 0.0 if high <= low else (score - low) / (high - low)


def stratified_bootstrap(strata: Sequence[np.ndarray], statistic: Callable[[np.ndarray], np.ndarray], *,
                         n_boot: int = N_BOOT, confidence: float = CONFIDENCE, seed: int = 0
                         ) -> tuple[float, float, float]:
    """(point estimate, CI low, CI high) of ``statistic`` over the pooled strata.

    strata: one 1-D array of run scores per env (NaNs dropped; empty strata ignored). statistic maps
    [R, n_runs] → [R] (a row-wise statistic, e.g. ``iqm`` with axis=-1) or [R, n_runs] → [R, k].
    """
    strata = [s[np.isfinite(s)] for s in map(np.asarray, strata)]
    strata = [s for s in strata if s.size]
    if not strata:
        return math.nan, math.nan, math.nan
    point = statistic(np.concatenate(strata)[None, :])[0]
    rng = np.random.default_rng(seed)
    reps = np.concatenate([s[rng.integers(0, s.size, size=(n_boot, s.size))] for s in strata], axis=1)
    values = statistic(reps)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(values, [tail, 100 - tail], axis=0)
    return point, low, high


def iqm_ci(strata: Sequence[np.ndarray], **kwargs) -> tuple[float, float, float]:
    """IQM of the pooled runs with its stratified-bootstrap CI."""
    return tuple(float(v) for v in stratified_bootstrap(strata, lambda x: iqm(x, axis=-1), **kwargs))


def performance_profile(strata: Sequence[np.ndarray], taus: np.ndarray, **kwargs
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fraction of runs with normalised score > τ for every τ, with stratified-bootstrap CIs.
    Returns (fraction, low, high), each shaped like taus."""
    def above(x: np.ndarray) -> np.ndarray:
        return (x[:, :, None] > taus[None, None, :]).mean(axis=1)

    point, low, high = stratified_bootstrap(strata, above, **kwargs)
    if np.isscalar(point) and math.isnan(point):
        nan = np.full(len(taus), np.nan)
        return nan, nan, nan
    return np.asarray(point), np.asarray(low), np.asarray(high)


def normalised_curve(returns: Sequence[float | None], low: float, high: float, points: int) -> np.ndarray:
    """A run's per-iteration episodic returns, min-max normalised and resampled onto ``points``
    equally spaced fractions of training. Iterations without a finished episode carry the last
    value forward (the env's minimum before the first one)."""
    filled, last = [], low
    for value in returns:
        last = last if value is None or not math.isfinite(value) else value
        filled.append(min_max_normalise(last, low, high))
    if not filled:
        return np.full(points, np.nan)
    x_run = np.linspace(0.0, 1.0, len(filled))
    return np.interp(np.linspace(0.0, 1.0, points), x_run, np.asarray(filled))
