"""Hand-worked cases for the control study's statistics (IQM, stratified bootstrap, profiles, curves)."""

import math

import numpy as np
import pytest

from benchmarks.bench.control_stats import iqm, iqm_ci, min_max_normalise, normalised_curve, performance_profile


def test_iqm_drops_the_outer_quartiles():
    scores = np.array([100.0, 1, 2, 3, 4, 5, 6, -50])  # 8 runs: trim 2 from each end
    assert iqm(scores) == pytest.approx((2 + 3 + 4 + 5) / 4)


def test_bootstrap_is_stratified_by_env():
    # Within each env every run scored the same: resampling inside an env changes nothing, so a
    # stratified CI collapses to the point. Pooled (unstratified) resampling would vary the env mix.
    strata = [np.zeros(3), np.ones(1)]
    point, low, high = iqm_ci(strata)
    assert point == low == high == pytest.approx(iqm(np.array([0.0, 0, 0, 1])))
    point, low, high = iqm_ci([np.array([0.0, 1.0, 0.5, 0.2]), np.array([0.9, 0.1])])
    assert low < point < high


def test_bootstrap_ignores_nans_and_empty_strata():
    point, low, high = iqm_ci([np.array([np.nan, 0.5]), np.array([])])
    assert point == low == high == 0.5
    assert all(math.isnan(v) for v in iqm_ci([np.array([np.nan])]))


def test_performance_profile_counts_runs_above_tau():
    taus = np.array([0.0, 0.25, 0.5, 0.75])
    frac, low, high = performance_profile([np.array([0.1, 0.6]), np.array([0.8, 0.3])], taus)
    np.testing.assert_allclose(frac, [1.0, 0.75, 0.5, 0.25])
    assert (low <= frac).all() and (frac <= high).all()


def test_normalisation_and_curve_forward_fill():
    assert min_max_normalise(15.0, 10.0, 20.0) == 0.5
    assert min_max_normalise(3.0, 3.0, 3.0) == 0.0
    # no episode yet -> the env minimum; a gap carries the last return forward
    curve = normalised_curve([None, 20.0, math.nan, 30.0, 10.0], 10.0, 30.0, points=5)
    np.testing.assert_allclose(curve, [0.0, 0.5, 0.5, 1.0, 0.0])
