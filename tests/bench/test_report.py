"""Tests for the bench reporting half: stats, figures and write_report on synthetic results."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench.report import md_to_html, write_report
from benchmarks.bench.stats import mean_ci, mean_curve

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _run(method: str, seed: int, *, train_wall: float, final: float, initial: float = 0.30,
         gen: float = 0.5, train: float = 0.7, prox: float = 0.001, sps: float = 80.0,
         params: dict | None = None, steps: int = 4, loss: float | None = 0.05,
         skipped: float = 0.0, masked: float = 0.0) -> dict:
    """One synthetic results.json run with hand-checkable numbers."""
    metrics = [{"step": s, "reward_mean": 0.3 + 0.05 * s + 0.01 * seed, "entropy": 0.2 - 0.01 * s,
                "importance_weight_max": 1.3, "importance_weight_min": 0.6, "clipped_tokens": 0.01,
                "masked_token_frac": masked, "ess_frac": 0.9, "loss": 0.05, "prox_time_s": prox,
                "step_time_s": 1.0, "elapsed_s": 1.5 * s, "skipped_updates": 0.0}
               for s in range(1, steps + 1)]
    metrics[-1]["loss"], metrics[-1]["skipped_updates"] = loss, skipped
    summary = {"steps": steps, "initial_eval_reward": initial, "final_eval_reward": final,
               "eval_history": [[0, initial], [steps // 2, (initial + final) / 2], [steps, final]],
               "wall_time_s": train_wall * 1.2, "train_wall_s": train_wall, "time_per_step_s": train_wall / steps,
               "gen_time_per_step_s": gen, "train_time_per_step_s": train, "prox_time_per_step_s": prox,
               "samples_per_s": sps, "peak_rss_mb": 900.0}
    return {"cell": f"{method}/s{seed}", "method": method, "seed": seed, "params": params or {},
            "summary": summary, "metrics": metrics}


def _results(suite: str, runs: list[dict]) -> dict:
    return {"suite": suite, "quick": True, "command": f"asyncrl bench {suite} --seeds 3",
            "created_at": "2026-11-21T20:00:00Z",
            "host": {"cpus": 2, "platform": "Linux-test", "torch": "2.13.0+cpu", "asyncrl": "0.1.0"},
            "runs": runs}


def _a3po_results(with_recompute: bool = True) -> dict:
    runs = []
    for seed, (w_sync, w_rec, w_ll) in enumerate([(100, 80, 50), (110, 88, 55), (120, 96, 60)]):
        runs.append(_run("sync", seed, train_wall=w_sync, final=0.60, prox=0.0))
        if with_recompute:
            runs.append(_run("async-recompute", seed, train_wall=w_rec, final=0.59, prox=0.1))
        runs.append(_run("async-loglinear", seed, train_wall=w_ll, final=0.58, prox=0.001))
    return _results("a3po", runs)


def _check_outputs(out, summary: dict, n_figures: int) -> None:
    """Common file checks: all outputs exist, PNGs valid and small, HTML self-contained."""
    for name in ("summary.json", "table.md", "report.html"):
        assert (out / name).is_file()
    assert not list(out.rglob("*.tmp")), "atomic writes must not leave temp files"
    pngs = sorted((out / "figures").glob("*.png"))
    assert len(pngs) == n_figures
    for png in pngs:
        data = png.read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) < 150_000
    # Strict JSON (no NaN literals) and identical to the returned dict.
    on_disk = json.loads((out / "summary.json").read_text(),
                         parse_constant=lambda c: pytest.fail(f"non-strict JSON constant {c}"))
    assert on_disk == summary
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == n_figures
    assert 'src="figures/' not in page and "<table>" in page and summary["command"] in page


def test_a3po_report(tmp_path):
    summary = write_report(tmp_path, _a3po_results())
    _check_outputs(tmp_path, summary, n_figures=6)
    assert summary["suite"] == "a3po" and summary["n_runs"] == 9 and summary["quick"] is True
    assert summary["speedup_vs_sync"] == pytest.approx(110 / 55)
    assert summary["speedup_vs_recompute"] == pytest.approx(88 / 55)
    assert summary["prox_time_ratio"] == pytest.approx(0.1 / 0.001)
    assert summary["ideal_overlap"] == pytest.approx((0.5 + 0.7) / 0.7)
    assert summary["speedup_fraction_of_ideal"] == pytest.approx(2.0 / (1.2 / 0.7))
    assert summary["eval_gap_sync_minus_loglinear"] == pytest.approx(2.0)
    sync = summary["methods"]["sync"]
    assert sync["train_wall_s"]["mean"] == pytest.approx(110) and sync["train_wall_s"]["n"] == 3
    assert sync["train_wall_s"]["ci_low"] <= 110 <= sync["train_wall_s"]["ci_high"]
    assert sync["importance_weight_max"]["mean"] == pytest.approx(1.3)
    assert summary["per_method"]["async-loglinear"]["final_eval_reward_mean"] == pytest.approx(0.58)
    assert summary["per_method"]["async-loglinear"]["final_eval_reward_ci"] == pytest.approx([0.58, 0.58])
    table = (tmp_path / "table.md").read_text()
    assert all(f"| {m} |" in table for m in ("sync", "async-recompute", "async-loglinear"))
    assert "Prox time/step" in table and "±" in table


def test_a3po_missing_method_and_keys(tmp_path):
    results = _a3po_results(with_recompute=False)
    del results["runs"][0]["summary"]["samples_per_s"]
    for rec in results["runs"][0]["metrics"]:
        rec.pop("entropy")
        rec["ess_frac"] = math.nan
    summary = write_report(tmp_path, results)
    _check_outputs(tmp_path, summary, n_figures=6)
    assert summary["speedup_vs_recompute"] is None and summary["prox_time_ratio"] is None
    assert summary["speedup_vs_sync"] == pytest.approx(2.0)
    assert summary["methods"]["sync"]["samples_per_s"]["n"] == 2  # seed 0's missing value dropped
    assert "async-recompute" not in summary["methods"]


def test_atlas_report(tmp_path):
    runs = []
    for seed in range(2):
        runs.append(_run("ppo", seed, train_wall=10, final=0.6 + 0.02 * seed, params={"K": 0, "row": "lag"}))
        runs.append(_run("ppo", seed, train_wall=10, final=0.3 + 0.02 * seed, params={"K": 4, "row": "lag"}))
        runs.append(_run("decoupled", seed, train_wall=10, final=0.6, params={"K": 0}, masked=0.02))
        # NaN losses reach results.json as null (strict JSON): must count as non-finite.
        runs.append(_run("decoupled", seed, train_wall=10, final=0.59, params={"K": 4}, loss=None if seed else 0.05))
        runs.append(_run("tis", seed, train_wall=10, final=0.5, params={"K": 0}, skipped=float(seed)))
        runs.append(_run("tis", seed, train_wall=10, final=0.25, initial=0.3, params={"K": 4}))
        runs.append(_run("ppo", seed, train_wall=10, final=0.55, params={"N": 8, "row": "buffer"}))
    summary = write_report(tmp_path, _results("atlas", runs))
    _check_outputs(tmp_path, summary, n_figures=7 + 2)  # seven lag-row heatmaps, two for the buffer row
    lag = summary["rows"]["lag"]
    assert lag["cols"] == [0, 4] and summary["rows"]["buffer"]["cols"] == [8]
    # ppo at K = 4 ends 30 points below sync but above where it started: degraded, not collapsed
    assert sorted(map(tuple, summary["collapsed"])) == [("lag", "decoupled", 4), ("lag", "tis", 0),
                                                        ("lag", "tis", 4)]
    healthy = lag["grid"]["decoupled"]["0"]
    assert healthy["collapsed"] is False and healthy["n"] == 2
    assert healthy["final_eval_reward"]["mean"] == pytest.approx(0.6)
    assert healthy["clip_or_mask_frac"]["mean"] == pytest.approx(0.01 + 0.02)
    assert healthy["ess_frac"]["mean"] == pytest.approx(0.9)
    assert healthy["importance_weight_max"]["mean"] == pytest.approx(1.3)
    assert lag["grid"]["tis"]["4"]["collapse_reasons"][0].startswith("final eval reward")
    # gaps to sync (ppo at K = 0: 0.61 mean): ppo at K = 4 ends 30 points below, beyond both spreads
    gap = lag["grid"]["ppo"]["4"]["gap_vs_sync"]
    assert gap["mean"] == pytest.approx(-0.30) and gap["ci_high"] < 0 and lag["grid"]["ppo"]["4"]["below_sync"]
    assert lag["grid"]["decoupled"]["4"]["gap_vs_sync"]["mean"] == pytest.approx(-0.02)
    # decoupled at K = 0 ends 1 point below sync's mean, but within sync's own seed spread
    assert lag["grid"]["decoupled"]["0"]["gap_vs_sync"]["mean"] == pytest.approx(-0.01)
    assert lag["grid"]["decoupled"]["0"]["below_sync"] is False
    assert summary["holds_to_k"] == {"ppo": 0, "decoupled": 4, "tis": None}
    # against its own K = 0: tis learns less than sync on fresh data (so "none" above) but is judged
    # here on what K = 4 takes from it (25 points)
    assert summary["holds_own_to_k"] == {"ppo": 0, "decoupled": 4, "tis": 0}
    # train reward 0.3 + 0.05·step (+0.01·seed) over 4 steps: too short for the 10-step window
    assert summary["target_train_reward"] is None
    table = (tmp_path / "table.md").read_text()
    assert table.count("✗") >= 4 and "| decoupled |" in table and "(-30.0*)" in table
    # 6 points below sync, but with 2 seeds a side Welch has 1 degree of freedom here: p = 0.105, undecided
    assert "**buffer row**" in table and "| ppo | 0.550 ± 0.000 (-6.0) |" in table
    assert summary["rows"]["buffer"]["grid"]["ppo"]["8"]["gap_vs_sync"]["verdict"] == "undecided"
    # Holm over the lag table's 5 comparisons: ppo (t = −21, p = 0.002) differs; tis (−36 points, 1 degree of
    # freedom, p = 0.018, 0.07 adjusted) and decoupled (−2) stay undecided
    assert "At K = 4, below sync (Welch, Holm p < 0.05): ppo (-30.0); equivalent to sync within 3 points" in table
    assert "within 3 points of sync (at it and every smaller K; a point estimate, not a test): decoupled 4, ppo 0, " \
           "tis none." in table
    assert "within 3 points of the same loss at K = 0 (point estimate): decoupled 4, ppo 0, tis 0." in table
    assert "| ppo at K = 4 | −30.0 [−36.1, −23.9] |" in table  # Welch: ±t_{0.975, 2} · 1.414 = ±6.08
    assert table.count("Diagnostics at K =") == 1 and "Diagnostics at K = 4" in table  # no K >= 8: the largest
    from benchmarks.bench.atlas_report import _matrix

    # the weight heatmap shows log10 of each cell's mean maximum (1.3 here); a missing cell stays NaN
    logw = _matrix(lag, "importance_weight_max", "mean", math.log10)
    gaps = _matrix(lag, "gap_vs_sync", "mean", lambda x: 100 * x)  # in points
    assert gaps[lag["losses"].index("ppo")][1] == pytest.approx(-30.0)  # ppo at K = 4
    assert logw[0][0] == pytest.approx(math.log10(1.3))
    grid = {"losses": ["a"], "cols": [8, 16], "grid": {"a": {"8": {"steps_to_target": 12.0}}}}
    steps = _matrix(grid, "steps_to_target", None)
    assert steps[0][0] == 12.0 and math.isnan(steps[0][1])


def test_atlas_target_and_steps_to_it():
    from benchmarks.bench.atlas_report import steps_to, target_reward

    sync = [{"metrics": [{"reward_mean": 0.2 + 0.01 * s} for s in range(20)]}]
    # start = mean of 0.20..0.24 = 0.22, end = mean of 0.30..0.39 = 0.345 → target 0.2825
    assert target_reward(sync) == pytest.approx((0.22 + 0.345) / 2)
    # the 5-step mean ending at step t is 0.2 + 0.01·(t − 3); ≥ 0.2825 first at t = 12 (1-based)
    assert steps_to(sync[0], target_reward(sync)) == 12
    assert math.isnan(steps_to(sync[0], 0.9))



def test_peer_trl_report(tmp_path):
    runs = []
    for seed in range(2):
        runs.append(_run("trl-grpo", seed, train_wall=40, final=0.50, sps=40.0))
        runs.append(_run("asyncrl-sync", seed, train_wall=30, final=0.52, sps=60.0))
        runs.append(_run("asyncrl-async-loglinear", seed, train_wall=20, final=0.55, sps=100.0))
    summary = write_report(tmp_path, _results("peer-trl", runs))
    _check_outputs(tmp_path, summary, n_figures=2)
    assert summary["samples_per_s_ratio_vs_trl"] == pytest.approx(2.5)
    assert summary["samples_per_s_ratio_sync_vs_trl"] == pytest.approx(1.5)
    assert summary["eval_reward_delta_vs_trl"] == pytest.approx(5.0)
    assert summary["per_method"]["trl-grpo"]["samples_per_s"]["mean"] == pytest.approx(40.0)


def test_unknown_suite_raises(tmp_path):
    with pytest.raises(ValueError, match="nope"):
        write_report(tmp_path, _results("nope", []))


def test_md_to_html_escapes_and_builds_table():
    page = md_to_html("| a | b<c |\n|---|---|\n| 1 ± 0.1 | ✗ |\n\nCaption & note\n")
    assert "<th>b&lt;c</th>" in page and "<td>1 ± 0.1</td>" in page and "<p>Caption &amp; note</p>" in page
    assert "---" not in page


def test_mean_ci_hand_cases():
    assert mean_ci([2.0] * 5) == (2.0, 2.0, 2.0)
    assert mean_ci([7.5]) == (7.5, 7.5, 7.5)
    assert all(math.isnan(v) for v in mean_ci([]))
    assert all(math.isnan(v) for v in mean_ci([math.nan, None]))
    mean, low, high = mean_ci([1.0, 2.0, 3.0, 4.0])  # s = 1.290994, t_{0.975,3} = 3.182446
    assert mean == 2.5 and (low, high) == pytest.approx((2.5 - 2.054260, 2.5 + 2.054260), abs=1e-6)
    assert mean_ci([1.0, math.nan, 3.0]) == mean_ci([1.0, 3.0])
    narrow = mean_ci([1.0, 5.0, 2.0, 4.0], confidence=0.5)
    wide = mean_ci([1.0, 5.0, 2.0, 4.0], confidence=0.99)
    assert wide[1] <= narrow[1] and narrow[2] <= wide[2]
    with pytest.raises(ValueError):
        mean_ci([1.0, 2.0], confidence=1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.floats(-1e6, 1e6), st.just(math.nan)), min_size=1, max_size=25))
def test_mean_ci_property(values):
    mean, low, high = mean_ci(values)
    clean = [v for v in values if not math.isnan(v)]
    if not clean:
        assert math.isnan(mean) and math.isnan(low) and math.isnan(high)
        return
    assert low <= mean + 1e-9 * (1 + abs(mean)) and mean <= high + 1e-9 * (1 + abs(mean))
    assert min(clean) - 1e-6 <= mean <= max(clean) + 1e-6


def test_mean_curve_aligns_by_step():
    a = [{"step": 1, "r": 1.0, "step_time_s": 2.0}, {"step": 2, "r": 2.0, "step_time_s": 2.0},
         {"step": 3, "r": 3.0, "step_time_s": 2.0}]
    # Out of order, step 2 missing, a NaN at step 3: matched on step number, not position.
    b = [{"step": 3, "r": math.nan, "step_time_s": 1.0}, {"step": 1, "r": 3.0, "step_time_s": 1.0}]
    x, mean, low, high = mean_curve([{"metrics": a}, b], "r")
    np.testing.assert_allclose(x, [1, 2, 3])
    np.testing.assert_allclose(mean, [2.0, 2.0, 3.0])
    assert low[0] <= 2.0 <= high[0]
    np.testing.assert_allclose([low[1], high[1], low[2], high[2]], [2.0, 2.0, 3.0, 3.0])
    x_wall, *_ = mean_curve([a], "r", x="wall_time")
    np.testing.assert_allclose(x_wall, [2.0, 4.0, 6.0])  # cumulative step_time_s
    no_times = [{"step": 1, "r": 1.0, "elapsed_s": 5.0}, {"step": 2, "r": 1.0, "elapsed_s": 9.0}]
    np.testing.assert_allclose(mean_curve([no_times], "r", x="wall_time")[0], [5.0, 9.0])
    assert all(arr.size == 0 for arr in mean_curve([a], "missing"))


@pytest.mark.parametrize("suite", ["a3po", "atlas", "peer-trl"])
def test_empty_results_still_render(tmp_path, suite):
    summary = write_report(tmp_path, _results(suite, []))
    assert summary["n_runs"] == 0 and summary["methods"] == {}
    assert (tmp_path / "report.html").is_file()
    assert all(p.read_bytes().startswith(PNG_MAGIC) for p in (tmp_path / "figures").glob("*.png"))


def test_noisy_long_curves_stay_small(tmp_path):
    from benchmarks.bench.figures import line_band_figure

    rng = np.random.default_rng(0)
    x = np.arange(1, 301, dtype=float)
    curves = {f"m{i}": (x, y := rng.random(300), y - rng.random(300), y + rng.random(300)) for i in range(3)}
    path = line_band_figure(tmp_path / "noisy.png", {"a": curves, "b": curves}, title="t", xlabel="step",
                            ylabel="y")
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) < 150_000


def test_method_line_figure_draws_every_seed(tmp_path, monkeypatch):
    """Per method: the mean line plus one thin line per seed (2 methods × 3 seeds → 8 lines)."""
    from benchmarks.bench import figures

    seen = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path, **kw: seen.setdefault("lines", [
        line for ax in fig.axes for line in ax.get_lines()]) and path)
    runs = [{"metrics": [{"step": s, "reward_mean": 0.1 * s + seed} for s in range(1, 6)]} for seed in range(3)]
    figures.method_line_figure(tmp_path / "f.png", {"a": runs, "b": runs}, {"": "reward_mean"}, title="t",
                               ylabel="reward")
    lines = seen["lines"]
    assert len(lines) == 8
    thin = [line for line in lines if line.get_linewidth() < 1.0]
    assert sorted(float(line.get_ydata()[0]) for line in thin) == pytest.approx([0.1, 0.1, 1.1, 1.1, 2.1, 2.1])


def test_a3po_staleness_variant_reports_the_approximation_error(tmp_path):
    """`bench a3po --ks 4`: per K, A-3PO against recompute, and its error binned by staleness."""
    runs = []
    for seed in range(2):
        runs.append(_run("sync", seed, train_wall=100, final=0.60, prox=0.0))
        runs.append(_run("async-recompute-k4", seed, train_wall=80, final=0.56, prox=0.1))
        ll = _run("async-loglinear-k4", seed, train_wall=50, final=0.52, prox=0.001)
        for rec, stale, err in zip(ll["metrics"], (1.2, 2.4, 3.6, 3.9), (0.01, 0.02, 0.03, 0.05)):
            rec.update(staleness_token_mean=stale, prox_abs_err_mean=err + 0.01 * seed, prox_abs_err_max=1.0)
        runs.append(ll)
    summary = write_report(tmp_path, _results("a3po", runs))
    _check_outputs(tmp_path, summary, n_figures=7)
    k4 = summary["by_k"]["4"]
    # equal seeds: the gap's CI is the gap itself, and no spread means no test
    gap = k4["eval_gap_loglinear_minus_recompute"]
    assert (gap["mean"], gap["ci_low"], gap["ci_high"]) == pytest.approx((-4.0, -4.0, -4.0))
    assert gap["p"] is None and gap["verdict"] == "undecided"
    assert k4["eval_gap_loglinear_minus_sync"]["mean"] == pytest.approx(-8.0)
    assert k4["max_measured_staleness"] == 4 and k4["prox_abs_err_at_max_staleness"] == pytest.approx(0.045)
    headline = summary["headline"]
    assert headline[0].startswith("At look-ahead W = K = 4 (realized staleness 2.77):")
    assert "4.0 points below async recompute [−4.0, −4.0]" in headline[0]
    assert headline[-1].startswith("Verdict: no K where A-3PO's difference from recompute passes the test")
    assert k4["speedup_vs_recompute"] == pytest.approx(80 / 50) and k4["speedup_vs_sync"] == pytest.approx(2.0)
    assert k4["realized_staleness"] == pytest.approx((1.2 + 2.4 + 3.6 + 3.9) / 4)
    assert k4["prox_abs_err_mean"] == pytest.approx(0.0275 + 0.005)
    assert k4["prox_abs_err_mean_stale_steps"] == pytest.approx(0.0275 + 0.005)  # every step here is stale
    from benchmarks.bench.a3po_report import _stale_steps_error

    fresh_first = {"metrics": [{"staleness_token_mean": 0.0, "prox_abs_err_mean": 0.0},
                               {"staleness_token_mean": 2.0, "prox_abs_err_mean": 0.04},
                               {"staleness_token_mean": 3.0, "prox_abs_err_mean": 0.02}]}
    assert _stale_steps_error([fresh_first]) == pytest.approx(0.03)  # not 0.02: the fresh step is left out
    assert _stale_steps_error([{"metrics": [{"staleness_token_mean": 0.0, "prox_abs_err_mean": 0.0}]}]) is None
    from benchmarks.bench.a3po_report import _error_curves

    x, mean, low, high = _error_curves({"ll": [r for r in runs if r["method"] == "async-loglinear-k4"]})["ll"]
    # bins 1, 2, 4 (3.6 and 3.9 round to 4: their errors average); seeds differ by 0.01
    np.testing.assert_allclose(x, [1, 2, 4])
    np.testing.assert_allclose(mean, [0.015, 0.025, 0.045])
    np.testing.assert_allclose(high - low, [0.01, 0.01, 0.01])
    assert "Realized staleness" in (tmp_path / "table.md").read_text()
    # per-token bins (prox_abs_err_stale<s>) take the place of the step's mean when logged
    for run in runs:
        if run["method"] == "async-loglinear-k4":
            run["metrics"][0].update(prox_abs_err_stale0=0.0, prox_abs_err_stale3=0.3)
            run["metrics"][1].update(prox_abs_err_stale3=0.1, prox_abs_err_stale5=float("nan"))
    x, mean, _, _ = _error_curves({"ll": [r for r in runs if r["method"] == "async-loglinear-k4"]})["ll"]
    # step 0: 0 and 3 from its bins; step 1: 3 (the NaN bin dropped); steps 2-3: their step means at 4
    np.testing.assert_allclose(x, [0, 3, 4])
    np.testing.assert_allclose(mean, [0.0, 0.2, 0.045])


def test_atlas_diagnostics_for_every_k_from_8():
    from benchmarks.bench.atlas_report import _diagnostics_tables

    stat = {"mean": 0.5, "ci_low": 0.5, "ci_high": 0.5, "n": 1}
    cell = {"n": 1, "steps_to_target": math.nan, "reached_target": 0, **{key: stat for key in (
        "clip_or_mask_frac", "importance_weight_max", "importance_weight_min", "ess_frac", "final_eval_answer_acc")}}
    block = {"losses": ["ppo"], "cols": [0, 4, 8, 16], "grid": {"ppo": {str(k): cell for k in (0, 4, 8, 16)}}}
    text = _diagnostics_tables(block)
    assert [line.split(" (")[0] for line in text.splitlines() if line.startswith("Diagnostics")] == [
        "Diagnostics at K = 8", "Diagnostics at K = 16"]
    assert "| ppo | — (0/1) |" in text


def test_atlas_with_one_seed_claims_no_difference(tmp_path):
    """One seed per arm has no spread to test against: even a 30-point gap is not "below sync"."""
    runs = [_run("ppo", 0, train_wall=10, final=0.6, params={"K": 0, "row": "lag"}),
            _run("ppo", 0, train_wall=10, final=0.3, params={"K": 4, "row": "lag"})]
    summary = write_report(tmp_path, _results("atlas", runs))
    cell = summary["rows"]["lag"]["grid"]["ppo"]["4"]
    assert cell["gap_vs_sync"]["mean"] == pytest.approx(-0.3) and cell["below_sync"] is False
    assert any("below sync (Welch, Holm p < 0.05): one seed: no test" in line for line in summary["headline"])


def test_atlas_compares_a3po_variants_with_a3po_and_skips_own_k0_when_absent(tmp_path):
    """A variant beside A-3PO at the same K: its gap to A-3PO with the ±2-point equivalence test,
    Holm over the variant table; a loss run without K = 0 has no "holds its own K = 0" entry."""
    runs = [_run("ppo", s, train_wall=10, final=0.40 + 0.01 * s, params={"K": 0, "row": "lag"}) for s in range(3)]
    for s in range(3):
        runs.append(_run("decoupled", s, train_wall=10, final=0.20 + 0.01 * s, params={"K": 16, "row": "lag"}))
        runs.append(_run("a3po_floor", s, train_wall=10, final=0.35 + 0.01 * s, params={"K": 16, "row": "lag"}))
        runs.append(_run("a3po_floor", s, train_wall=10, final=0.38 + 0.01 * s, params={"K": 4, "row": "lag"}))
    summary = write_report(tmp_path, _results("atlas", runs))
    table = summary["rows"]["lag"]["variants_vs_a3po"]
    assert list(table) == ["a3po_floor at K = 16"]  # no A-3PO run at K = 4: nothing to compare there
    gap = table["a3po_floor at K = 16"]
    assert gap["mean"] == pytest.approx(0.15) and gap["margin"] == 0.02 and gap["verdict"] == "differs"
    assert "A-3PO variants − A-3PO (decoupled)" in (tmp_path / "table.md").read_text()
    assert summary["holds_own_to_k"] == {"ppo": 0}  # the others have no K = 0 cell


def test_scale_report_gives_the_training_phase_speedup_of_two_ranks(tmp_path):
    runs = []
    for seed in range(2):  # 4 steps of 10 s: step 2.5 s; training 1.0 s (one rank) vs 0.5 s (two)
        runs.append(_run("sync-w1", seed, train_wall=10, final=0.40 + 0.01 * seed, train=1.0, sps=20.0))
        runs.append(_run("sync-w2", seed, train_wall=8, final=0.40 + 0.01 * seed, train=0.5, sps=25.0))
    summary = write_report(tmp_path, _results("scale", runs))
    pair = summary["pairs"]["sync-w2 / sync-w1"]
    # training phase: 20 × 2.5 / 1.0 = 50 against 25 × 2.0 / 0.5 = 100 samples/s
    assert pair["train_phase_speedup"] == pytest.approx(2.0) and pair["samples_per_s_speedup"] == pytest.approx(1.25)
    assert pair["eval_gap"]["mean"] == pytest.approx(0.0) and "sync-w2 / sync-w1: 2.00×" in summary["headline"][0]
