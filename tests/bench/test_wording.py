"""Bench report wording: fixed-point numbers at the mean's precision, units, headline sentences."""

import math

from benchmarks.bench.wording import (ONE_SEED, decimals, headline_a3po, headline_a3po_by_k, headline_items, headline_peer_trl,
                                      mean_pm, number, seconds, seeds)


def _stat(mean, half, n=3):
    return {"mean": mean, "ci_low": mean - half, "ci_high": mean + half, "n": n}


def test_numbers_are_fixed_point_with_three_significant_digits():
    assert number(0.00264) == "0.00264" and number(123456.7) == "123,457" and number(0.5) == "0.500"
    assert number(None) == "n/a" and number(math.nan) == "n/a"
    assert decimals(2.64) == 2 and decimals(0.0) == 2
    # the old cell "0.00264 ± 8.6e-05": now in ms, half-width at the mean's decimals
    assert mean_pm(2.64, 0.086) == "2.64 ± 0.09"
    assert "e-" not in mean_pm(0.00264, 8.6e-05) and mean_pm(0.00264, 8.6e-05) == "0.00264 ± 0.00009"
    assert seconds(0.00264) == "2.64 ms" and seconds(13.24) == "13.2 s"
    assert seeds(1) == "1 seed" and seeds(3) == "3 seeds"


def test_a3po_headline_in_words_with_a_verdict():
    methods = {"sync": {"final_eval_reward": _stat(0.565, 0.01)},
               "async-loglinear": {"final_eval_reward": _stat(0.552, 0.02)}}
    first, verdict = headline_a3po({"speedup_vs_sync": 1 / 0.65}, methods)
    assert first == ("A-3PO reaches eval reward 0.552 (± 0.020, 3 seeds), 1.3 points below sync, "
                     "in 0.65× its training wall time.")
    assert verdict == "Verdict: A-3PO trains 1.54× faster than sync, with its eval reward within seed noise."
    methods["async-loglinear"]["final_eval_reward"] = _stat(0.40, 0.01)
    assert "16.5 points below sync (outside seed noise)" in headline_a3po({"speedup_vs_sync": 0.5}, methods)[1]
    assert "2.00× slower" in headline_a3po({"speedup_vs_sync": 0.5}, methods)[1]


def test_a3po_headline_without_sync_compares_with_recompute():
    methods = {"async-recompute": {"final_eval_reward": _stat(0.570, 0.01)},
               "async-loglinear": {"final_eval_reward": _stat(0.600, 0.01)}}
    summary = {"speedup_vs_sync": None, "speedup_vs_recompute": 1.30}
    first, verdict = headline_a3po(summary, methods)
    assert first.endswith("3.0 points above recompute, in 0.77× its training wall time.")
    assert verdict.startswith("Verdict: A-3PO trains 1.30× faster than recompute")
    methods["sync"] = {"final_eval_reward": _stat(0.600, 0.01)}  # sync, where it ran, stays the baseline
    assert "faster than sync" in headline_a3po({**summary, "speedup_vs_sync": 1.1}, methods)[1]
    assert "no comparison" in headline_a3po(summary, {"sync": methods["sync"]})[0]


def test_headline_items_use_words_not_keys():
    items = dict(headline_items({"speedup_vs_sync": 2.0, "eval_gap_sync_minus_loglinear": 1.25,
                                 "weight_sync_s_per_step": 0.0123, "unlisted_key": 3.0, "n_runs": 9}))
    assert items == {"speed-up of A-3PO over sync (training wall time)": "2.00×",
                     "eval reward, sync minus A-3PO": "+1.2 points",
                     "weight sync per step (publish + pull)": "12.3 ms"}
    assert not any("_" in label for label in items)


def test_bar_chart_draws_one_dot_per_seed(tmp_path, monkeypatch):
    from matplotlib.axes import Axes

    from benchmarks.bench import figures

    drawn = []
    real = Axes.scatter
    monkeypatch.setattr(Axes, "scatter", lambda self, x, y, **kw: (drawn.append(list(y)), real(self, x, y, **kw))[1])
    figures.bar_chart(tmp_path / "f.png", ["a", "b"], [1.0, 2.0], title="t", ylabel="y",
                      points=[[0.9, 1.1, math.nan], [2.0]])
    assert drawn == [[0.9, 1.1], [2.0]]


def test_step_zero_row_starts_the_wall_time_axis():
    from benchmarks.bench.stats import mean_curve

    run = [{"step": 0, "eval_reward": 0.2, "elapsed_s": 0.1},
           {"step": 1, "reward_mean": 0.5, "step_time_s": 2.0}, {"step": 2, "reward_mean": 0.7, "step_time_s": 3.0}]
    x, mean, _, _ = mean_curve([run], "reward_mean", "wall_time")
    assert list(x) == [2.0, 5.0] and list(mean) == [0.5, 0.7]  # cumulative step time, not elapsed_s


# one seed: no claim about seed noise


def test_one_seed_claims_no_seed_noise():
    methods = {"sync": {"final_eval_reward": _stat(0.60, 0.0, 1)},
               "async-loglinear": {"final_eval_reward": _stat(0.569, 0.0, 1)}}
    first, verdict = headline_a3po({"speedup_vs_sync": 1.5}, methods)
    assert "3.1 points below sync" in verdict and f"({ONE_SEED})" in verdict
    assert "seed noise" not in first + verdict
    peers = {"asyncrl-async-loglinear": {"final_eval_reward": _stat(0.5, 0.0, 1), "samples_per_s": _stat(9, 0, 1)},
             "trl-grpo": {"final_eval_reward": _stat(0.6, 0.0, 1), "samples_per_s": _stat(3, 0, 1)}}
    assert "seed noise" not in " ".join(headline_peer_trl({"samples_per_s_ratio_vs_trl": 3.0}, peers))
    # three seeds still get the test
    methods = {m: {"final_eval_reward": _stat(v, 0.01, 3)} for m, v in (("sync", 0.6), ("async-loglinear", 0.569))}
    assert "(outside seed noise)" in headline_a3po({"speedup_vs_sync": 1.5}, methods)[1]


def test_one_seed_by_k_verdict_claims_nothing():
    gap = {"mean": -3.1, "ci_low": -3.1, "ci_high": -3.1}
    by_k = {"2": {"eval_gap_loglinear_minus_recompute": gap, "eval_gap_loglinear_minus_sync": gap}}
    one = {m: {"final_eval_reward": _stat(0.5, 0.0, 1)} for m in ("sync", "async-loglinear-k2", "async-recompute-k2")}
    lines = headline_a3po_by_k(by_k, one)
    assert lines[0].count(ONE_SEED) == 2 and "[" not in lines[0]
    assert lines[-1].startswith("Verdict: none") and "beyond the seed spread" not in lines[-1]
    # two seeds each: the verdict is the Welch test's (stats.compare_arms), a gap without one claims nothing
    two = {m: {"final_eval_reward": _stat(0.5, 0.0, 2)} for m in one}
    assert headline_a3po_by_k(by_k, two)[-1].startswith("Verdict: no K where A-3PO's difference")
    tested = {**gap, "verdict": "differs", "p_holm": 0.01, "mde": 2.0, "n_a": 2, "n_b": 2}
    lines = headline_a3po_by_k({"2": {**by_k["2"], "eval_gap_loglinear_minus_recompute": tested}}, two)
    assert lines[-1] == "Verdict: A-3PO ends below recompute (differs: Welch, Holm p < 0.05) at K = 2."
    assert "(Holm p = 0.010, MDE 2.0: differs)" in lines[0]
