"""Warm-start-level statistics (benchmarks.bench.warm_start) on numbers worked by hand, properties of the
mixed model, and the study report's secondary sections (benchmarks.bench.study_warm)."""

import math

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_1samp

from benchmarks.bench.paired import paired
from benchmarks.bench.plan_file import parse_plan
from benchmarks.bench.study_report import build_study
from benchmarks.bench.warm_start import icc, mixed_gap, warm_start_ci

T975_1DF = 12.706204736174707  # t quantile 0.975 on 1 df: tan(0.475 π)


def test_two_warm_starts_of_two_gaps_by_hand():
    # warm start 0: gaps 1, 3 (mean 2); warm start 1: 5, 7 (mean 6); grand mean 4.
    # SSB = 2·((2−4)² + (6−4)²) = 16 on 1 df: MSB = 16; SSW = 1+1+1+1 = 4 on 2 df: MSW = 2.
    # SE = sqrt(MSB / N) = sqrt(16 / 4) = 2; t = 4 / 2 = 2 on 1 df (Cauchy): p = 1 − (2/π)·atan(2) = 0.29517.
    # σ_u² = (MSB − MSW) / n = (16 − 2) / 2 = 7; σ_e² = 2.
    # TOST within ±5: max(P(T > (4 + 5)/2 = 4.5), P(T < (4 − 5)/2 = −0.5)) = 1/2 − atan(0.5)/π = 0.35242.
    out = mixed_gap([1, 3, 5, 7], [0, 0, 1, 1], margin=5)
    assert out["mean"] == 4 and out["se"] == pytest.approx(2) and out["df"] == 1
    assert out["p"] == pytest.approx(1 - 2 / math.pi * math.atan(2))
    assert out["p_tost"] == pytest.approx(0.5 - math.atan(0.5) / math.pi)
    assert (out["ci_low"], out["ci_high"]) == pytest.approx((4 - 2 * T975_1DF, 4 + 2 * T975_1DF))
    assert out["sd_between"] == pytest.approx(math.sqrt(7)) and out["sd_within"] == pytest.approx(math.sqrt(2))
    assert not out["boundary"] and (out["n_warm_starts"], out["n"]) == (2, 4)
    # ICC = 7 / (7 + 2); the warm-start means 2 and 6: mean 4, SD 2·sqrt(2), SE 2, half-width 2 · t(1 df)
    assert icc([1, 3, 5, 7], [0, 0, 1, 1]) == pytest.approx(7 / 9)
    ci = warm_start_ci([1, 3, 5, 7], [0, 0, 1, 1])
    assert (ci["mean"], ci["ci_low"], ci["ci_high"]) == pytest.approx((4, 4 - 2 * T975_1DF, 4 + 2 * T975_1DF))


def test_the_between_component_at_zero_keeps_the_between_mean_square():
    # warm starts −3, 5 (mean 1); −2, 6 (mean 2); −1, 7 (mean 3): grand mean 2.
    # SSB = 2·(1 + 0 + 1) = 4 on 2 df: MSB = 2; SSW = 3·(16 + 16) = 96 on 3 df: MSW = 32 > MSB, so
    # REML puts σ_u² at 0 (boundary). SE = sqrt(2 / 6); t = 2 / sqrt(1/3) = sqrt(12) on 2 df, whose
    # two-sided p is 1 − sqrt(t² / (2 + t²)) = 1 − sqrt(6/7) = 0.074180.
    # The paired t on the same 6 gaps: variance (4 + 96) / 5 = 20, t = 2 / sqrt(20/6) = 1.095 on 5 df.
    gaps, blocks = [-3, 5, -2, 6, -1, 7], [0, 0, 1, 1, 2, 2]
    out = mixed_gap(gaps, blocks)
    # REML's σ_e² on the boundary is the pooled (SSB + SSW) / (N − 1) = (4 + 96) / 5 = 20
    assert out["boundary"] and out["sd_between"] == 0 and out["sd_within"] == pytest.approx(math.sqrt(20))
    assert out["se"] == pytest.approx(math.sqrt(1 / 3)) and out["df"] == 2
    assert out["p"] == pytest.approx(1 - math.sqrt(6 / 7))
    assert math.isnan(out["p_tost"])  # no margin given
    p_paired = paired(gaps, [0] * 6)["p"]
    assert p_paired == pytest.approx(ttest_1samp(gaps, 0).pvalue) and p_paired > 0.3
    assert icc(gaps, blocks) == 0  # floored, as REML floors σ_u²


def _reml_by_search(gaps, blocks) -> tuple[float, float]:
    """(σ_u, σ_e) maximising the restricted likelihood of d = 1μ + Z u + e written out in general,
    −½ (log|V| + log|1ᵀV⁻¹1| + rᵀV⁻¹r), V = σ_u² ZZᵀ + σ_e² I, by a bounded numerical search: no use of
    the balanced design's closed form that mixed_gap relies on."""
    from scipy.optimize import minimize

    y = np.asarray(gaps, float)
    z = (np.asarray(blocks)[:, None] == np.unique(blocks)[None, :]).astype(float)
    one = np.ones_like(y)

    def minus_loglik(theta):
        v = theta[0] * z @ z.T + theta[1] * np.eye(y.size)
        vi = np.linalg.inv(v)
        info = one @ vi @ one
        r = y - one * (one @ vi @ y) / info
        return 0.5 * (np.linalg.slogdet(v)[1] + math.log(info) + r @ vi @ r)

    fit = minimize(minus_loglik, [1.0, 1.0], bounds=[(0, None), (1e-9, None)], method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-12})
    return math.sqrt(fit.x[0]), math.sqrt(fit.x[1])


@pytest.mark.parametrize("gaps, blocks", [
    ([1, 3, 5, 7, 2, 2.5], [0, 0, 1, 1, 2, 2]),  # between spread well above the within: interior
    ([-3, 5, -2, 6, -1, 7], [0, 0, 1, 1, 2, 2]),  # the boundary case above
])
def test_the_closed_form_is_what_a_general_reml_search_finds(gaps, blocks):
    out = mixed_gap(gaps, blocks)
    between, within = _reml_by_search(gaps, blocks)
    assert (out["sd_between"], out["sd_within"]) == pytest.approx((between, within), abs=2e-3)


def test_an_unbalanced_design():
    # warm start 0: 0, 2 (mean 1); warm start 1: 3, 5, 7 (mean 5). N = 5, grand mean 17/5 = 3.4.
    # SSB = 2·(1 − 3.4)² + 3·(5 − 3.4)² = 11.52 + 7.68 = 19.2 on 1 df; SSW = 2 + 8 = 10 on 3 df: MSW = 10/3.
    # n0 = (5 − (2² + 3²)/5) / 1 = 2.4; σ_u² = (19.2 − 10/3) / 2.4 = 6.6111; ICC = 6.6111 / (6.6111 + 3.3333).
    values, blocks = [0, 2, 3, 5, 7], ["a", "a", "b", "b", "b"]
    assert icc(values, blocks) == pytest.approx(6.611111 / (6.611111 + 10 / 3), rel=1e-6)
    ci = warm_start_ci(values, blocks)  # each warm start once: means 1 and 5, mean 3, SE 2
    assert (ci["mean"], ci["ci_high"], ci["n_warm_starts"], ci["n"]) == pytest.approx((3, 3 + 2 * T975_1DF, 2, 5))
    with pytest.raises(ValueError, match=r"^mixed model: unbalanced warm starts \(2, 3 gaps\)") as err:
        mixed_gap(values, blocks, 0.5)
    assert "\n" not in str(err.value)


def test_degenerate_inputs():
    assert math.isnan(mixed_gap([], [])["mean"]) and math.isnan(icc([1, 2], [0, 0]))
    one = mixed_gap([0.5, 0.7], [0, 0])  # one warm start: no between spread to test against
    assert one["mean"] == pytest.approx(0.6) and math.isnan(one["p"])
    flat = mixed_gap([1, 1, 1, 1], [0, 0, 1, 1], margin=0.1)  # no spread: no test, as paired()
    assert flat["mean"] == 1 and math.isnan(flat["p"]) and math.isnan(flat["p_tost"])
    assert math.isnan(icc([1, 2, 3], [0, 1, 2]))  # one value per warm start: between and within confounded
    assert math.isnan(mixed_gap([1, 2, 4], [0, 1, 2])["sd_within"])
    assert warm_start_ci([1, math.nan, 3, 5], [0, 0, 1, 1])["n"] == 3  # a missing value is dropped ...
    with pytest.raises(ValueError, match="unbalanced warm starts \\(1, 2 gaps\\)"):  # ... and unbalances the gaps
        mixed_gap([1, math.nan, 3, 5], [0, 0, 1, 1])
    with pytest.raises(ValueError, match="align them by seed"):
        mixed_gap([1, 2], [0])


_GAPS = st.lists(st.floats(-1, 1, allow_nan=False).map(lambda x: round(x, 3)), min_size=12, max_size=12)


@settings(max_examples=60, deadline=None)
@given(gaps=_GAPS, shift=st.floats(-1, 1, allow_nan=False), which=st.integers(0, 2), per=st.sampled_from([1, 2, 4]))
def test_mixed_model_properties(gaps, shift, which, per):
    n_warm = 12 // per
    gaps = gaps[: n_warm * per]
    blocks = [i // per for i in range(len(gaps))]
    out = mixed_gap(gaps, blocks)
    # balanced: μ̂ is the paired mean, whatever the warm-start effect
    assert out["mean"] == pytest.approx(paired(gaps, [0.0] * len(gaps))["mean"], abs=1e-12)
    # shifting every gap of one warm start by c moves μ̂ by c / W
    moved = [g + shift * (b == which) for g, b in zip(gaps, blocks)]
    assert mixed_gap(moved, blocks)["mean"] == pytest.approx(out["mean"] + shift / n_warm, abs=1e-9)
    # the test is the one-sample t of the warm-start means (exact for any σ_u); one gap per warm start: the paired t
    means = np.array(gaps).reshape(n_warm, per).mean(axis=1)
    if means.std() > 1e-6:
        assert out["p"] == pytest.approx(ttest_1samp(means, 0).pvalue, rel=1e-6)
        if per == 1:
            assert out["p"] == pytest.approx(paired(gaps, [0.0] * len(gaps))["p"], rel=1e-6)
    # adding one constant to every gap leaves the SE alone
    assert mixed_gap([g + shift for g in gaps], blocks)["se"] == pytest.approx(out["se"], abs=1e-9)


PLAN = """\
name: ws
seeds: 8
warm_starts: 2
arms:
  sync: {run.mode: sync}
  a3po: {run.mode: simulated, async.lag: 2}
primary:
  endpoint: final_eval_reward
  test: paired
  margin: 0.03
  family: [a3po - sync]
"""


def _run(arm: str, seed: int, final: float, block: int | None = None) -> dict:
    params = {"arm": arm} if block is None else {"arm": arm, "warm_start": block}
    return {"cell": f"{arm}-s{seed}", "method": arm, "seed": seed, "params": params,
            "summary": {"final_eval_reward": final, "eval_history": [[0, 0.2], [4, final]]}, "metrics": []}


def _study(tmp_path, plan_text: str, runs: list) -> tuple[dict, str]:
    plan = parse_plan(yaml.safe_load(plan_text))
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": runs}, tmp_path, {})
    return extra, table


def test_the_report_adds_the_warm_start_level_beside_the_plans_test(tmp_path):
    start = [0.3, 0.5]  # two warm starts 20 points apart, shared by both arms' seeds
    runs = [_run("sync", s, start[s % 2] + 0.01 * (s // 2), s % 2) for s in range(8)]
    runs += [_run("a3po", s, start[s % 2] - 0.02 + 0.005 * ((s * 3) % 4), s % 2) for s in range(8)]
    extra, table = _study(tmp_path, PLAN, runs)
    level = extra["warm_start_level"]["sync"]["final_eval_reward"]
    assert level["n_warm_starts"] == 2 and level["mean"] == pytest.approx(0.415)
    assert level["ci_high"] - level["ci_low"] > 10 * (level["seed_ci_high"] - level["seed_ci_low"]) / 2
    assert level["icc"] > 0.9
    comp = extra["primary"][0]
    assert comp["verdict"] == extra["verdicts"]["a3po - sync"]  # the plan's verdict, unchanged
    assert comp["mixed"]["test"] == "mixed" and comp["mixed"]["df"] == 1
    assert extra["mixed_verdicts"] == {"a3po - sync": comp["mixed"]["verdict"]}
    assert "## Arms at the warm-start level (secondary)" in table
    assert "## Primary family under a mixed model (secondary; the verdicts above stand)" in table
    # a seed lost on one arm unbalances the gaps: that comparison is refused in one cell, nothing else
    extra, table = _study(tmp_path, PLAN, runs[:-1])
    assert extra["primary"][0]["mixed"]["verdict"] == "refused" and "unbalanced warm starts (4, 3 gaps)" in table


def test_welch_and_single_warm_start_plans(tmp_path):
    runs = [_run(arm, s, 0.4 + 0.01 * s) for arm in ("sync", "a3po") for s in range(8)]  # no params: s % W
    extra, table = _study(tmp_path, PLAN.replace("test: paired", "test: welch"), runs)
    assert extra["warm_start_level"]["a3po"]["eval_auc"]["n_warm_starts"] == 2 and "mixed_verdicts" not in extra
    assert "the mixed model of paired gaps does not apply" in table and "mixed" not in extra["primary"][0]
    extra, table = _study(tmp_path, PLAN.replace("warm_starts: 2", "warm_starts: 1"), runs)
    assert "warm_start_level" not in extra and "warm-start level" not in table
