"""Monte Carlo calibration of the two-arm statistics (benchmarks.bench.stats, benchmarks.bench.paired).

Each property is checked for our implementation AND for a deliberately wrong variant that must
violate it by a clear margin, so every test here can fail. All simulations are vectorised along
the last axis (welch_p, tost_p, paired_p, paired_tost_p) with fixed numpy seeds: deterministic,
and the whole file runs in a few seconds.

Tolerances. A simulated rate is a binomial proportion over DRAWS independent draws, with standard
error sqrt(p (1 − p) / DRAWS) at the nominal rate p; we allow 3 of them (`_tol`): were the seeds
random, an exact test would fail by chance about once in 700 runs. Welch's test is not exact (its
degrees of freedom are an approximation), so its level and its interval's coverage are held to
Bradley's (1978) robustness criterion, a true level within [α/2, 3α/2], plus the 3 SE: at 3 seeds
of SD 4 against 10 of SD 1 its true level is 6.5 % (2 million draws), not 5 %.
"""

import math

import numpy as np
import pytest
from scipy import stats as ss

from benchmarks.bench.paired import compare_paired, paired, paired_p, paired_tost_p
from benchmarks.bench.stats import ALPHA, POWER, compare_arms, holm, tost_p, verdicts_within, welch, welch_p

DRAWS = 20_000


def _tol(p: float, draws: int = DRAWS) -> float:
    """3 binomial standard errors of a rate whose true value is p, over `draws` draws."""
    return 3.0 * math.sqrt(p * (1.0 - p) / draws)


def _holm_rejects(p: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Holm's rejections for each family along the last axis (stats.holm, vectorised: sort, scale
    the i-th smallest of m by m − i, running maximum, unsort); checked against stats.holm below."""
    m = p.shape[-1]
    order = np.argsort(p, axis=-1)
    adjusted = np.maximum.accumulate(np.take_along_axis(p, order, -1) * (m - np.arange(m)), axis=-1)
    out = np.empty_like(adjusted)
    np.put_along_axis(out, order, np.minimum(adjusted, 1.0), -1)
    return out < alpha


def _student_p(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """WRONG VARIANT: Student's t test with the pooled variance, which assumes equal variances."""
    n_a, n_b = a.shape[-1], b.shape[-1]
    pooled = ((n_a - 1) * a.var(-1, ddof=1) + (n_b - 1) * b.var(-1, ddof=1)) / (n_a + n_b - 2)
    stat = (a.mean(-1) - b.mean(-1)) / np.sqrt(pooled * (1.0 / n_a + 1.0 / n_b))
    return 2.0 * ss.t.sf(np.abs(stat), n_a + n_b - 2)


def _unit_sd(n: int) -> np.ndarray:
    """n evenly spaced values with sample SD exactly 1 (up to rounding): a comparison of two such
    arms has pooled SD 1, so the MDE verdicts_within gives it is in units of the true SD."""
    x = np.arange(n, dtype=float)
    return (x - x.mean()) / x.std(ddof=1)


def test_vectorised_holm_matches_stats_holm():
    p = np.random.default_rng(0).uniform(0.0, 0.1, (300, 7))
    assert np.array_equal(_holm_rejects(p), np.array([holm(row) for row in p]) < ALPHA)


def test_welch_level_with_unequal_variances_and_sizes():
    # 3 seeds of SD 4 against 10 of SD 1: the small arm carries the variance, where pooling fails
    draws, rng = 40_000, np.random.default_rng(11)
    a, b = rng.normal(0.0, 4.0, (draws, 3)), rng.normal(0.0, 1.0, (draws, 10))
    ours, wrong = float(np.mean(welch_p(a, b) < ALPHA)), float(np.mean(_student_p(a, b) < ALPHA))
    assert ALPHA / 2 - _tol(ALPHA, draws) <= ours <= 1.5 * ALPHA + _tol(ALPHA, draws), ours  # seen: 0.062
    assert wrong > 3 * ALPHA, wrong  # seen: 0.30, six times the nominal level


def test_holm_keeps_the_family_wise_error_at_alpha():
    # 20,000 families of m = 8 null comparisons at 3 seeds a side; a family errs if anything "differs"
    m, rng = 8, np.random.default_rng(12)
    p = welch_p(rng.normal(0.0, 1.0, (DRAWS, m, 3)), rng.normal(0.0, 1.0, (DRAWS, m, 3)))
    ours = float(np.mean(_holm_rejects(p).any(-1)))
    wrong = float(np.mean((p < ALPHA).any(-1)))  # WRONG VARIANT: no correction
    assert ours <= ALPHA + _tol(ALPHA), ours  # seen: 0.024 (Welch at 3 seeds is conservative)
    assert wrong > 4 * ALPHA, wrong  # seen: 0.25


def _family_mde(compare, n: int, m: int) -> dict:
    """A family of m identical comparisons with (paired-difference or pooled) SD 1, through verdicts_within."""
    family = [compare(_unit_sd(n), np.zeros(n) if compare is compare_paired else _unit_sd(n), 0.1) for _ in range(m)]
    verdicts_within(family)
    return family[0]


@pytest.mark.parametrize("n", [3, 5])
def test_holm_consistent_mde_has_80_percent_power_under_holm(n):
    # one true effect of size "mde" among m − 1 nulls, common SD 1; power = share of families where
    # Holm calls the true one "differs" (its rate is near 0.8, so the tolerance is 3 SE at 0.8)
    m, rng = 8, np.random.default_rng(20 + n)
    comp = _family_mde(compare_arms, n, m)
    # WRONG VARIANT 2: the textbook shortcut (t_{1−α/2m} + t_{power}) · sd · √(2/n), pooled df
    shortcut = (ss.t.ppf(1 - ALPHA / m / 2, 2 * n - 2) + ss.t.ppf(POWER, 2 * n - 2)) * math.sqrt(2.0 / n)
    power = {}
    for name, delta in (("ours", comp["mde"]), ("unadjusted", comp["mde_unadjusted"]), ("shortcut", shortcut)):
        a, b = rng.normal(0.0, 1.0, (DRAWS, m, n)), rng.normal(0.0, 1.0, (DRAWS, m, n))
        a[:, 0] += delta
        power[name] = float(np.mean(_holm_rejects(welch_p(a, b))[:, 0]))
    # ≥ 80 %, and not far above it: an MDE inflated "to be safe" would also be wrong
    assert POWER - _tol(POWER) <= power["ours"] <= POWER + 0.03, power  # seen: 0.80 (n=3), 0.80 (n=5)
    assert power["unadjusted"] < POWER - 0.3, power  # seen: 0.23 (n=3), 0.36 (n=5)
    assert power["shortcut"] < POWER - 0.05, power  # seen: 0.50 (n=3), 0.70 (n=5)


def test_paired_holm_consistent_mde_has_80_percent_power():
    # 3 seeds, each shared by both arms (seed SD 2), differences of SD 1, m = 6 comparisons
    n, m, rng = 3, 6, np.random.default_rng(31)
    comp = _family_mde(compare_paired, n, m)
    shortcut = (ss.t.ppf(1 - ALPHA / m / 2, n - 1) + ss.t.ppf(POWER, n - 1)) / math.sqrt(n)  # WRONG VARIANT 2
    power = {}
    for name, delta in (("ours", comp["mde"]), ("unadjusted", comp["mde_unadjusted"]), ("shortcut", shortcut)):
        seed = rng.normal(0.0, 2.0, (DRAWS, m, 1, n))
        x = seed + rng.normal(0.0, math.sqrt(0.5), (DRAWS, m, 2, n))  # each arm's noise SD 1/√2
        x[:, 0, 0] += delta
        power[name] = float(np.mean(_holm_rejects(paired_p(x[..., 0, :], x[..., 1, :]))[:, 0]))
    assert POWER - _tol(POWER) <= power["ours"] <= POWER + 0.03, power  # seen: 0.81
    assert power["unadjusted"] < POWER - 0.3, power  # seen: 0.24
    assert power["shortcut"] < POWER - 0.05, power  # seen: 0.70


@pytest.mark.parametrize("n", [3, 5])
def test_welch_interval_covers_the_true_difference(n):
    # arms of SD 1 and 2, true difference 0.7; the interval covers it iff the Welch test of
    # H0: difference = 0.7 does not reject (the interval is the set of shifts the test accepts)
    rng, true = np.random.default_rng(40 + n), 0.7
    a, b = rng.normal(true, 1.0, (DRAWS, n)), rng.normal(0.0, 2.0, (DRAWS, n))
    for i in range(50):  # that duality, against welch()'s own interval
        out = welch(a[i], b[i])
        assert (out["ci_low"] <= true <= out["ci_high"]) == (welch_p(a[i], b[i], true) >= ALPHA)
    ours = float(np.mean(welch_p(a, b, true) >= ALPHA))
    # WRONG VARIANT: a normal interval, difference ± 1.96 · Welch standard error
    se = np.sqrt(a.var(-1, ddof=1) / n + b.var(-1, ddof=1) / n)
    wrong = float(np.mean(np.abs(a.mean(-1) - b.mean(-1) - true) <= ss.norm.ppf(1 - ALPHA / 2) * se))
    # Bradley's criterion on the miss rate (see the module docstring), 3 SE at the nominal 95 %
    assert 1 - 1.5 * ALPHA - _tol(1 - ALPHA) <= ours <= 1 - ALPHA / 2 + _tol(1 - ALPHA), ours  # seen: 0.955, 0.950
    assert wrong < 1 - 1.5 * ALPHA - 0.01, wrong  # seen: 0.87 (n=3), 0.90 (n=5)


def test_paired_level_and_power_with_a_shared_seed_effect():
    # 5 seeds; the seed moves both arms alike (SD 2), each run adds its own noise (SD 0.5)
    n, rng = 5, np.random.default_rng(50)
    x = rng.normal(0.0, 2.0, (DRAWS, 1, n)) + rng.normal(0.0, 0.5, (DRAWS, 2, n))
    a, b = x[:, 0], x[:, 1]
    level = float(np.mean(paired_p(a, b) < ALPHA))
    assert abs(level - ALPHA) <= _tol(ALPHA), level  # exact test: seen 0.050
    shifted = a + 1.0  # a true difference of 1.0 (the two-sided-5 % paired MDE here is 1.19)
    ours = float(np.mean(paired_p(shifted, b) < ALPHA))
    # its exact power: noncentral t, 4 df, noncentrality 1.0 · √5 / SD of a difference (0.5 · √2)
    exact = float(ss.nct.sf(ss.t.ppf(1 - ALPHA / 2, n - 1), n - 1, 1.0 * math.sqrt(n) / (0.5 * math.sqrt(2.0))))
    welch_power = float(np.mean(welch_p(shifted, b) < ALPHA))  # WRONG VARIANT: pairs taken as independent
    # WRONG VARIANT: pairs broken by shuffling the reference within each draw; fixed permutations
    shuffled = np.take_along_axis(b, rng.permuted(np.tile(np.arange(n), (DRAWS, 1)), axis=1), axis=1)
    broken = float(np.mean(paired_p(shifted, shuffled) < ALPHA))
    assert abs(ours - exact) <= _tol(exact), (ours, exact)  # seen: 0.664 against 0.663
    assert welch_power < 0.1 and broken < 0.1, (welch_power, broken)  # seen: 0.02, 0.055


@pytest.mark.parametrize("n", [3, 5, 10])
def test_tost_rarely_calls_a_margin_sized_difference_equivalent(n):
    # true difference exactly ±margin: "equivalent" must fire at most α of the time (Welch and paired)
    rng, margin = np.random.default_rng(60 + n), 0.5
    rates = {}
    for sign in (1.0, -1.0):
        a, b = rng.normal(sign * margin, 0.2, (DRAWS, n)), rng.normal(0.0, 0.2, (DRAWS, n))
        rates[f"welch{sign:+.0f}"] = float(np.mean(tost_p(a, b, margin) < ALPHA))
        x = rng.normal(0.0, 2.0, (DRAWS, 1, n)) + rng.normal(0.0, 0.2, (DRAWS, 2, n))
        rates[f"paired{sign:+.0f}"] = float(np.mean(paired_tost_p(x[:, 0] + sign * margin, x[:, 1], margin) < ALPHA))
        # WRONG VARIANT: "equivalent" when EITHER one-sided test rejects (min of the two p-values)
        either = np.minimum(welch_p(a, b, -margin, "greater"), welch_p(a, b, margin, "less"))
        rates[f"either{sign:+.0f}"] = float(np.mean(either < ALPHA))
    ours = {k: v for k, v in rates.items() if not k.startswith("either")}
    assert max(ours.values()) <= ALPHA + _tol(ALPHA), rates  # seen: at most 0.052
    assert min(rates["either+1"], rates["either-1"]) > 0.9, rates  # seen: 0.998-1.0
    if n == 3:  # WRONG VARIANT: "not shown to differ, so equivalent", the fallacy TOST replaces
        a, b = rng.normal(margin, 0.2, (DRAWS, n)), rng.normal(0.0, 0.2, (DRAWS, n))
        absent = float(np.mean(welch_p(a, b) >= ALPHA))
        assert absent > 0.3, absent  # seen: 0.47


def test_paired_comparison_dicts_agree_with_the_vectorised_tests():
    # the calibrated vectorised functions are the ones the report dicts use
    rng = np.random.default_rng(70)
    a, b = rng.normal(0.0, 1.0, 6), rng.normal(0.3, 1.0, 6)
    out = compare_paired(a, b, 0.5)
    assert out["p"] == pytest.approx(float(paired_p(a, b)), rel=1e-12)
    assert out["p_tost"] == pytest.approx(float(paired_tost_p(a, b, 0.5)), rel=1e-12)
    assert paired(a, b)["mean"] == pytest.approx(float(np.mean(a - b)))
