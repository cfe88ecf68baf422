"""Statistics that hold at 3-10 seeds: hand-worked t interval, Welch test, TOST, MDE and Holm, and a
calibration on simulated nulls showing that "differs" fires at most ~5 % of the time when the arms are
the same and "equivalent" at most ~5 % of the time when they differ by exactly the margin."""

import math

import numpy as np
import pytest
from scipy import stats as ss

from asyncrl.bench.stats import (compare_arms, holm, mean_ci, min_detectable_diff, tost_p, verdict, verdicts_within,
                                 welch, welch_p)

SIMULATED_PAIRS = 2000
MAX_RATE = 0.06  # nominal 5 % plus about 2 binomial standard errors at 2,000 pairs


def test_t_interval_hand_worked():
    # [1, 2, 3]: mean 2, s = 1, t_{0.975, 2} = 4.302653; half-width 4.302653 / sqrt(3) = 2.484138
    mean, low, high = mean_ci([1.0, 2.0, 3.0])
    assert mean == 2.0
    assert (low, high) == pytest.approx((2 - 2.484138, 2 + 2.484138), abs=1e-6)
    assert mean_ci([1.0, math.nan, None, 3.0]) == mean_ci([1.0, 3.0])
    assert mean_ci([7.5]) == (7.5, 7.5, 7.5) and mean_ci([2.0] * 4) == (2.0, 2.0, 2.0)
    assert all(math.isnan(v) for v in mean_ci([]))
    with pytest.raises(ValueError, match="confidence"):
        mean_ci([1.0, 2.0], confidence=1.0)


def test_welch_hand_worked_and_against_scipy():
    a, b = [0.30, 0.35, 0.20], [0.50, 0.52, 0.48]
    # var_a/3 = 0.005833/3, var_b/3 = 0.0004/3: se = sqrt(0.0062333/3) = 0.045583; diff = −0.216667
    out = welch(a, b)
    assert out["mean"] == pytest.approx(-0.216667, abs=1e-6)
    ref = ss.ttest_ind(a, b, equal_var=False)
    assert ref.statistic == pytest.approx(-0.216667 / 0.045583, rel=1e-4)
    assert out["p"] == pytest.approx(ref.pvalue, rel=1e-12)
    ci = ref.confidence_interval(0.95)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert welch_p(np.array(a), np.array(b), alternative="less") == pytest.approx(
        ss.ttest_ind(a, b, equal_var=False, alternative="less").pvalue, rel=1e-12)
    one = welch([0.3], [0.5, 0.6])  # one seed: the difference, no test
    assert one["ci_low"] == one["ci_high"] == one["mean"] and math.isnan(one["p"]) and math.isnan(one["mde"])


def test_tost_matches_two_shifted_one_sided_scipy_tests():
    rng = np.random.default_rng(1)
    a, b = rng.normal(0.0, 1.0, 8), rng.normal(0.2, 1.5, 6)
    lower = ss.ttest_ind(a + 1.0, b, equal_var=False, alternative="greater").pvalue
    upper = ss.ttest_ind(a - 1.0, b, equal_var=False, alternative="less").pvalue
    assert tost_p(a, b, 1.0) == pytest.approx(max(lower, upper), rel=1e-12)
    tight = np.array([0.0, 0.01, -0.01, 0.005])
    assert tost_p(tight, tight + 0.002, 0.05) < 0.05  # 0.2 points apart, spread 1 point: equivalent at 5
    with pytest.raises(ValueError, match="margin"):
        tost_p(a, b, 0.0)


def test_min_detectable_difference_hand_worked():
    # n = 3 a side, sd = 1: df 4, t_{0.975,4} = 2.776445, t_{0.80,4} = 0.940965, sqrt(2/3) = 0.816497
    assert min_detectable_diff(3, 3, 1.0) == pytest.approx((2.776445 + 0.940965) * 0.816497, rel=1e-5)
    assert min_detectable_diff(10, 10, 2.0) < min_detectable_diff(3, 3, 2.0)
    assert math.isnan(min_detectable_diff(1, 3, 1.0))


def test_holm_hand_worked():
    # sorted 0.01, 0.03, 0.04 of m = 3: 3·0.01 = 0.03, 2·0.03 = 0.06, max(0.06, 1·0.04) = 0.06
    adjusted = holm([0.01, 0.04, 0.03, math.nan])
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06]) and math.isnan(adjusted[3])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1, monotone
    assert holm([]) == []


def test_verdicts_within_a_table():
    table = [compare_arms([0.30, 0.35, 0.20], [0.50, 0.52, 0.48], margin=0.03),
             compare_arms([0.50, 0.51, 0.49, 0.50], [0.50, 0.50, 0.51, 0.49], margin=0.03),
             compare_arms([0.1, 0.6, 0.3], [0.5, 0.2, 0.4], margin=0.03)]
    verdicts_within(table)
    assert table[0]["p"] < 0.05 and table[0]["p_holm"] == pytest.approx(min(1.0, 3 * table[0]["p"]))
    assert [c["verdict"] for c in table] == ["undecided", "equivalent", "undecided"]  # 3·0.032 > 0.05
    assert verdict(0.01, 0.01) == "differs" and verdict(math.nan, math.nan) == "undecided"


def _rates(draw, n: int, shift: float, margin: float) -> tuple[float, float]:
    """(share of pairs Welch calls different, share TOST calls equivalent within margin)."""
    a, b = draw((SIMULATED_PAIRS, n)), draw((SIMULATED_PAIRS, n)) + shift
    return float(np.mean(welch_p(a, b) < 0.05)), float(np.mean(tost_p(a, b, margin) < 0.05))


@pytest.mark.parametrize("n", [3, 5, 10])
def test_false_positive_rate_of_differs_on_nulls(n):
    rng = np.random.default_rng(20261126 + n)
    for draw in (lambda shape: rng.normal(0.3, 0.05, shape), lambda shape: rng.lognormal(0.0, 1.0, shape)):
        differs, _ = _rates(draw, n, 0.0, 0.03)
        assert differs <= MAX_RATE, (n, differs)


@pytest.mark.parametrize("n", [3, 5, 10])
def test_tost_rarely_calls_a_margin_sized_difference_equivalent(n):
    rng = np.random.default_rng(7 + n)
    # sd 0.2 against a margin of 0.5: TOST has power here, so the bound is tested where it can bite
    _, equivalent = _rates(lambda shape: rng.normal(0.0, 0.2, shape), n, 0.5, 0.5)
    assert equivalent <= MAX_RATE, (n, equivalent)
    _, true_equivalent = _rates(lambda shape: rng.normal(0.0, 0.1, shape), n, 0.0, 0.5)
    assert true_equivalent > 0.5, (n, true_equivalent)  # and it does find a true equivalence
