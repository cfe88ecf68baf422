"""Statistics that hold at 3-10 seeds: hand-worked t interval, Welch and paired tests, TOST, MDE and Holm,
and a calibration on simulated nulls showing that "differs" fires at most ~5 % of the time when the arms are
the same and "equivalent" at most ~5 % of the time when they differ by exactly the margin."""

import math

import numpy as np
import pytest
from scipy import stats as ss

from scipy.integrate import quad
from scipy.optimize import brentq

from benchmarks.bench.paired import compare_paired, paired, paired_p, paired_tost_p
from benchmarks.bench.stats import (compare_arms, holm, mean_ci, min_detectable_diff, tost_p, verdict, verdicts_within,
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


def test_paired_hand_worked_and_against_scipy():
    a, b = [0.30, 0.35, 0.20], [0.50, 0.52, 0.48]
    # differences −0.20, −0.17, −0.28: mean −0.216667, s = sqrt(0.0064667 / 2) = 0.056862,
    # se = 0.056862 / √3 = 0.032830, t = −6.59975 on 2 df; half-width t_{0.975,2} · se = 4.302653 · 0.032830
    out = paired(a, b)
    assert out["mean"] == pytest.approx(-0.216667, abs=1e-6)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((-0.216667 - 0.141254, -0.216667 + 0.141254), abs=1e-6)
    ref = ss.ttest_rel(a, b)
    assert ref.statistic == pytest.approx(-0.216667 / 0.032830, rel=1e-4)
    assert out["p"] == pytest.approx(ref.pvalue, rel=1e-12)
    ci = ref.confidence_interval(0.95)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((ci.low, ci.high), rel=1e-12)
    assert out["mde"] == pytest.approx(min_detectable_diff(3, 3, 0.056862, paired=True), rel=1e-5)
    assert (out["n_a"], out["n_b"], out["test"]) == (3, 3, "paired")
    assert out.keys() - {"test"} == welch(a, b).keys() - {"test"}
    assert paired_p(np.array(a), np.array(b), alternative="less") == pytest.approx(
        ss.ttest_rel(a, b, alternative="less").pvalue, rel=1e-12)
    # the pairing removes the shared part: Welch on the same numbers gives 0.032, paired 0.022
    assert out["p"] < welch(a, b)["p"]


def test_paired_drops_incomplete_pairs_and_refuses_misaligned_lists():
    # a pair with a missing side goes as a whole; the other pairs keep their partners
    assert paired([1.0, math.nan, 3.0, 4.0], [0.5, 2.0, None, 3.2]) == paired([1.0, 4.0], [0.5, 3.2])
    with pytest.raises(ValueError, match="differ in length") as err:
        paired([1.0, 2.0, 3.0], [1.0, 2.0])
    assert "\n" not in str(err.value)
    one = paired([0.3, math.nan], [0.5, 0.6])  # one complete pair: the difference, no test
    assert one["ci_low"] == one["ci_high"] == one["mean"] == pytest.approx(-0.2) and math.isnan(one["p"])
    assert math.isnan(one["mde"]) and math.isnan(compare_paired([0.3], [0.5], 0.1)["p_tost"])
    same = paired([1.0, 2.0, 3.0], [0.5, 1.5, 2.5])  # a constant difference has no spread to test against
    assert same["mean"] == pytest.approx(0.5) and math.isnan(same["p"])
    assert all(math.isnan(paired([], [])[k]) for k in ("mean", "p", "mde"))


def test_paired_tost_and_holm_family():
    rng = np.random.default_rng(3)
    seed = rng.normal(0.0, 1.0, 6)
    a, b = seed + rng.normal(0.0, 0.1, 6), seed + rng.normal(0.05, 0.1, 6)
    lower = ss.ttest_rel(a + 0.3, b, alternative="greater").pvalue
    upper = ss.ttest_rel(a - 0.3, b, alternative="less").pvalue
    assert paired_tost_p(a, b, 0.3) == pytest.approx(max(lower, upper), rel=1e-12)
    family = [compare_paired(a, b, 0.3), compare_paired(a + 1.0, b, 0.3)]
    verdicts_within(family)
    assert [c["verdict"] for c in family] == ["equivalent", "differs"]
    assert family[1]["p_holm"] == pytest.approx(2 * min(c["p"] for c in family))
    # Holm-consistent paired MDE: the paired test's MDE at two-sided 0.05 / 2, from the SD of the differences
    sd = float(np.std(a - b, ddof=1))
    assert family[0]["mde"] == pytest.approx(min_detectable_diff(6, 6, sd, alpha=0.025, paired=True), rel=1e-9)
    assert family[0]["mde_unadjusted"] == pytest.approx(min_detectable_diff(6, 6, sd, paired=True), rel=1e-9)


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
    # n = 3 a side, sd = 1. Equal arms make Welch's statistic Student's, T ~ noncentral t(4, δ/√(2/3)),
    # and Welch rejects when |T| > t_{0.975, df} with df = 2 / (B² + (1 − B)²), B ~ Uniform(0, 1) the
    # first arm's share of the summed squares. Power at the MDE, integrated independently with quad:
    mde = min_detectable_diff(3, 3, 1.0)
    nc = mde / math.sqrt(2.0 / 3.0)
    power, _ = quad(lambda b: ss.nct.sf(ss.t.ppf(0.975, 2.0 / (b * b + (1 - b) ** 2)), 4, nc), 0.0, 1.0)
    assert power == pytest.approx(0.80, abs=1e-9) and mde == pytest.approx(3.507446, abs=1e-6)
    # df between n − 1 = 2 and 2n − 2 = 4 brackets it: the exact Student power at df 4 needs less
    student = brentq(lambda d: ss.nct.sf(2.776445, 4, d / math.sqrt(2 / 3)) - 0.8, 0.0, 20.0)
    assert 3.0 < student < mde < brentq(lambda d: ss.nct.sf(4.302653, 4, d / math.sqrt(2 / 3)) - 0.8, 0.0, 20.0)
    # the old shortcut (t_{0.975,4} + t_{0.80,4}) · √(2/3) = 3.0353 is below both: it overstates power
    assert (2.776445 + 0.940965) * 0.816497 < student
    # many seeds: the normal-theory (z_{0.975} + z_{0.80}) · sd · √(2/n) = 2.801585 · √(2/200)
    assert min_detectable_diff(200, 200, 1.0) == pytest.approx(2.801585 * 0.1, rel=3e-3)
    assert min_detectable_diff(10, 10, 2.0) < min_detectable_diff(3, 3, 2.0)
    assert min_detectable_diff(3, 3, 2.0) == pytest.approx(2 * mde)  # linear in the SD
    assert min_detectable_diff(3, 3, 1.0, alpha=0.05 / 4) > mde  # a stricter test needs a larger effect
    assert math.isnan(min_detectable_diff(1, 3, 1.0))
    # paired, 3 pairs, SD of the differences 1: noncentral t(2, δ·√3) beyond t_{0.975,2} = 4.302653
    mde_paired = min_detectable_diff(3, 3, 1.0, paired=True)
    assert ss.nct.sf(4.302653, 2, mde_paired * math.sqrt(3)) == pytest.approx(0.80, abs=1e-6)
    with pytest.raises(ValueError, match="pairs"):
        min_detectable_diff(3, 4, 1.0, paired=True)


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
    unadjusted = [c["mde"] for c in table]
    verdicts_within(table)
    assert table[0]["p"] < 0.05 and table[0]["p_holm"] == pytest.approx(min(1.0, 3 * table[0]["p"]))
    assert [c["verdict"] for c in table] == ["undecided", "equivalent", "undecided"]  # 3·0.032 > 0.05
    assert verdict(0.01, 0.01) == "differs" and verdict(math.nan, math.nan) == "undecided"
    # MDE at Holm's first step: two-sided 0.05 / 3 (three finite p), from the same pooled SD
    pooled = math.sqrt((np.var([0.30, 0.35, 0.20], ddof=1) + np.var([0.50, 0.52, 0.48], ddof=1)) / 2)
    assert table[0]["mde"] == pytest.approx(min_detectable_diff(3, 3, pooled, alpha=0.05 / 3), rel=1e-9)
    assert [c["mde_unadjusted"] for c in table] == unadjusted
    assert table[0]["mde"] > 1.45 * table[0]["mde_unadjusted"]  # 1.49 times larger at 3 seeds, m = 3
    again = [dict(c) for c in table]
    verdicts_within(again)  # idempotent: rescales from mde_unadjusted, not from the rescaled mde
    assert [c["mde"] for c in again] == [c["mde"] for c in table]
    scaled = [{**c, "mde": 100 * c["mde_unadjusted"], "mde_unadjusted": 100 * c["mde_unadjusted"]} for c in table]
    verdicts_within(scaled)  # an MDE already in points stays in points
    assert scaled[0]["mde"] == pytest.approx(100 * table[0]["mde"], rel=1e-9)
    with_one_seed = [compare_arms([0.3], [0.5, 0.6], 0.03), *[dict(c) for c in table]]
    verdicts_within(with_one_seed)  # a NaN p is not a comparison: m stays 3
    assert math.isnan(with_one_seed[0]["mde"]) and with_one_seed[1]["mde"] == pytest.approx(table[0]["mde"])


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
