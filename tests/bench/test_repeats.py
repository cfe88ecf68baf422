"""The speed protocol (benchmarks.bench.repeats, speed_report): --repeats runs each cell N times in
interleaved order, one at a time, and every speed ratio is reported over the paired repeats."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.bench.cli import main
from benchmarks.bench.repeats import (interleave, protocol_mark, ratio_stats, share_of_ideal, speed_ratios)
from benchmarks.bench.report import write_report
from benchmarks.bench.runner import pending_cells
from benchmarks.bench.suites import build_cells


# ---- order -----------------------------------------------------------------------------------

def test_two_arms_over_three_repeats_run_a_b_b_a_a_b():
    assert interleave(["A", "B"], 3) == [("A", 1), ("B", 1), ("B", 2), ("A", 2), ("A", 3), ("B", 3)]
    assert [a for a, _ in interleave(["A", "B", "C"], 2)] == ["A", "B", "C", "C", "B", "A"]
    with pytest.raises(ValueError, match="--repeats"):
        interleave(["A"], 0)


def test_list_shows_the_interleaved_order_without_running_anything(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    code = main(["a3po", "--methods", "sync,async-loglinear", "--seeds", "1", "--repeats", "3", "--list"])
    assert code == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert names == ["sync-s0-r1", "async-loglinear-s0-r1", "async-loglinear-s0-r2", "sync-s0-r2",
                     "sync-s0-r3", "async-loglinear-s0-r3"]
    assert not (tmp_path / "runs").exists()


def test_repeats_share_the_seed_and_the_work():
    cells = build_cells("peer-trl", repeats=2, methods=["asyncrl-sync"])
    assert [c.name for c in cells] == ["asyncrl-sync-s0-r1", "asyncrl-sync-s0-r2"]
    assert cells[0].overrides == cells[1].overrides and cells[0].seed == cells[1].seed == 0
    assert [c.name for c in build_cells("a3po", repeats=2, seeds=1, only=["sync"])] == ["sync-s0-r1", "sync-s0-r2"]


@pytest.mark.parametrize("argv, words", [
    (["a3po", "--jobs", "2", "--repeats", "5"], "--repeats: runs cells one at a time"),
    (["peer-trl", "--ray", "--repeats", "5"], "drop --ray"),
    (["atlas", "--repeats", "5"], "--repeats: suite atlas does not take it"),
    (["a3po", "--repeats", "0"], "--repeats: must be >= 1"),
])
def test_bad_repeats_are_refused_in_one_line(argv, words, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_a_cut_off_run_resumes_at_the_first_unfinished_repeat(tmp_path):
    from rich.console import Console

    cells = build_cells("a3po", methods=["sync", "async-loglinear"], seeds=1, repeats=2)
    for cell in cells[:2]:  # repeat 1 of both arms finished before the cut
        (tmp_path / cell.name).mkdir()
        (tmp_path / cell.name / "summary.json").write_text("{}")
    todo = pending_cells(cells, tmp_path, Console(quiet=True))
    assert [c.name for c in todo] == ["async-loglinear-s0-r2", "sync-s0-r2"]


# ---- ratio statistics, worked by hand ----------------------------------------------------------

def test_speed_ratios_say_how_many_times_faster_the_arm_ran():
    # times: baseline ÷ arm, 110 / 100 = 1.1 and 180 / 200 = 0.9; rates: arm ÷ baseline, 60 / 40 = 1.5;
    # a pair with a missing side is dropped
    assert speed_ratios([100, 200, None], [110, 180, 5], higher_is_faster=False) == pytest.approx([1.1, 0.9])
    assert speed_ratios([60.0], [40.0], higher_is_faster=True) == pytest.approx([1.5])
    with pytest.raises(ValueError, match="pair them"):
        speed_ratios([1, 2], [1], True)


def test_ratio_stats_by_hand():
    # log ratios 0.1, 0.2, 0.3: mean 0.2, so geomean e^0.2 = 1.22140; SD 0.1, SE 0.1 / √3 = 0.0577350;
    # t(0.975, 2 df) = 4.302653, half-width 0.248414; interval [e^−0.048414, e^0.448414] = [0.952739, 1.565826]
    got = ratio_stats([math.exp(0.1), math.exp(0.2), math.exp(0.3)])
    assert got["n"] == 3
    assert got["geomean"] == pytest.approx(1.2214028, rel=1e-6)
    assert (got["min"], got["max"]) == pytest.approx((math.exp(0.1), math.exp(0.3)))
    assert (got["ci_low"], got["ci_high"]) == pytest.approx((0.952739, 1.565826), rel=1e-5)
    one = ratio_stats([1.3])  # one pair: no spread to estimate
    assert one["geomean"] == pytest.approx(1.3) and math.isnan(one["ci_low"]) and math.isnan(one["ci_high"])
    assert ratio_stats([])["n"] == 0 and math.isnan(ratio_stats([])["geomean"])


def test_share_of_the_ideal_gain_by_hand():
    assert share_of_ideal(1.3, 1.6) == pytest.approx(0.5)  # (1.3 − 1) / (1.6 − 1) = 0.3 / 0.6
    assert share_of_ideal(0.97, 1.72) == pytest.approx(-0.0416667, rel=1e-5)  # −0.03 / 0.72: slower
    assert share_of_ideal(1.2, None) is None and share_of_ideal(1.2, 1.0) is None  # no ideal, or no gain to share


def test_protocol_mark():
    assert protocol_mark(1) == "(1 repeat: below the 5-repeat protocol)"
    assert protocol_mark(4) == "(4 repeats: below the 5-repeat protocol)"
    assert protocol_mark(5) == "" and protocol_mark(8) == ""


times = st.lists(st.tuples(st.floats(0.01, 1e4), st.floats(0.01, 1e4)), min_size=2, max_size=12)


@settings(max_examples=60, deadline=None)
@given(times, st.booleans())
def test_swapping_the_arms_inverts_the_ratio_and_its_interval(pairs, higher):
    arm, base = [a for a, _ in pairs], [b for _, b in pairs]
    forward = ratio_stats(speed_ratios(arm, base, higher))
    back = ratio_stats(speed_ratios(base, arm, higher))
    assert back["geomean"] == pytest.approx(1 / forward["geomean"], rel=1e-9)
    assert back["ci_low"] == pytest.approx(1 / forward["ci_high"], rel=1e-9)
    assert back["ci_high"] == pytest.approx(1 / forward["ci_low"], rel=1e-9)
    eps = 1 + 1e-12  # exp(mean of logs) of equal ratios can differ from them in the last bit
    assert forward["min"] / eps <= forward["geomean"] <= forward["max"] * eps
    assert forward["ci_low"] / eps <= forward["geomean"] <= forward["ci_high"] * eps
    # a rate is the inverse of a time: the same runs give the same speed ratio either way
    assert speed_ratios(arm, base, True) == pytest.approx(speed_ratios(base, arm, False))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.01, 1e4), min_size=2, max_size=12), st.floats(0.1, 10))
def test_identical_timings_give_one_with_a_zero_width_interval(values, scale):
    same = ratio_stats(speed_ratios(values, values, False))
    assert same["geomean"] == pytest.approx(1.0) and same["ci_low"] == pytest.approx(1.0)
    assert same["ci_high"] == pytest.approx(1.0)
    # the arm a constant factor faster every time: that factor, still without width
    faster = ratio_stats(speed_ratios([v / scale for v in values], values, False))
    assert faster["ci_low"] == pytest.approx(scale) and faster["ci_high"] == pytest.approx(scale)


# ---- the report --------------------------------------------------------------------------------

def _run(method: str, seed: int, repeat: int, wall: float, final: float, load: float = 0.5) -> dict:
    steps = 10
    return {"cell": f"{method}-s{seed}-r{repeat}", "method": method, "seed": seed, "repeat": repeat, "params": {},
            "summary": {"final_eval_reward": final, "initial_eval_reward": 0.3, "train_wall_s": wall,
                        "time_per_step_s": wall / steps, "samples_per_s": 640 / wall, "gen_time_per_step_s": 0.4,
                        "train_time_per_step_s": 0.6, "steps": steps},
            "metrics": [], "load": {"cores": 2, "start": [load, 0.4, 0.3], "end": [load, 0.4, 0.3]}}


def _study(repeats: int, loads: dict | None = None) -> dict:
    # sync 100 s every time; A-3PO 80, 100, 125, 80, 100 s: speed-ups 1.25, 1, 0.8, 1.25, 1
    walls = [80.0, 100.0, 125.0, 80.0, 100.0][:repeats]
    runs = []
    for r, wall in enumerate(walls, start=1):
        arms = [("sync", 100.0, 0.60 + 0.01 * r), ("async-loglinear", wall, 0.58)]
        for method, w, final in arms if r % 2 else arms[::-1]:
            runs.append(_run(method, 0, r, w, final, (loads or {}).get((method, r), 0.5)))
    return {"suite": "a3po", "quick": False, "command": "python -m benchmarks a3po --repeats 5",
            "created_at": "2026-12-06T00:00:00Z", "host": {"cpus": 2}, "runs": runs}


def test_the_report_gives_each_ratio_over_the_paired_repeats(tmp_path):
    summary = write_report(tmp_path, _study(5, loads={("sync", 3): 3.5}))
    speed = summary["speed"]
    assert speed["repeats"] == 5 and speed["overloaded_runs"] == ["sync-s0-r3"]
    wall = speed["comparisons"]["async-loglinear vs sync"]["train_wall_s"]
    # log ratios ln 1.25, 0, −ln 1.25, ln 1.25, 0: mean ln 1.25 / 5, so the geometric mean is 1.25^0.2 = 1.04564
    assert wall["ratios"] == pytest.approx([1.25, 1.0, 0.8, 1.25, 1.0])
    assert wall["geomean"] == pytest.approx(1.25 ** 0.2) and (wall["min"], wall["max"]) == pytest.approx((0.8, 1.25))
    # SD of the logs: deviations ln1.25 × (0.8, −0.2, −1.2, 0.8, −0.2), squares sum 2.8 ln²1.25, /4 → SD =
    # ln 1.25 × √0.7 = 0.186695; SE = 0.0834927; × t(0.975, 4) 2.776445 = 0.231813 either side of 0.0446287
    assert (wall["ci_low"], wall["ci_high"]) == pytest.approx((math.exp(-0.187184), math.exp(0.276442)), rel=1e-4)
    # the ideal: (0.4 + 0.6) / 0.6 = 1.6667 from each sync run; share (1.04564 − 1) / 0.6667 = 6.85 %
    assert wall["ideal"] == pytest.approx(1 / 0.6) and wall["share_of_ideal"] == pytest.approx(0.0684593, rel=1e-5)
    assert speed["comparisons"]["async-loglinear vs sync"]["samples_per_s"]["geomean"] == pytest.approx(1.25 ** 0.2)
    # the reward statistics take repeat 1 of each seed: one seed, not five
    assert summary["methods"]["sync"]["final_eval_reward"]["n"] == 1
    assert summary["methods"]["sync"]["final_eval_reward"]["mean"] == pytest.approx(0.61)
    table = (tmp_path / "table.md").read_text()
    assert "below the 5-repeat protocol" not in table
    assert "| 1.05× |" in table and "sync-s0-r3 | 3 |" in table and "3.50 → 3.50 (2 cores)" in table
    assert "Under load" in table


def test_fewer_repeats_are_marked_in_the_table_and_the_headline(tmp_path):
    write_report(tmp_path, _study(2))
    table = (tmp_path / "table.md").read_text()
    assert "(2 repeats: below the 5-repeat protocol)" in table
    verdict = next(line for line in table.splitlines() if line.startswith("Verdict"))
    # the headline quotes the paired figure: ratios 1.25 and 1, geometric mean √1.25 = 1.118
    assert "speed ratio 1.12×, 95 % paired interval" in verdict and "2 repeats: below the 5-repeat protocol" in verdict
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["speed"]["comparisons"]["async-loglinear vs sync"]["time_per_step_s"]["below_protocol"] is True
    # and in the report page's list of headline numbers, where under --repeats the speed-up is the
    # paired geometric mean over every repeat (√1.25 = 1.118), not the ratio of repeat 1's means (1.25)
    assert summary["speedup_vs_sync"] == pytest.approx(1.25 ** 0.5)
    assert "over sync (training wall time): 1.12× (2 repeats: below the 5-repeat protocol)</li>" in \
        (tmp_path / "report.html").read_text()


def test_peer_trl_compares_with_sync_and_trl_and_defines_no_ideal(tmp_path):
    runs = []
    for r in (1, 2):
        for method, wall in (("trl-grpo", 40.0), ("asyncrl-sync", 32.0), ("asyncrl-async-loglinear", 25.0)):
            runs.append(_run(method, 0, r, wall, 0.5))
    summary = write_report(tmp_path, {**_study(1), "suite": "peer-trl", "runs": runs})
    comps = summary["speed"]["comparisons"]
    assert set(comps) == {"asyncrl-sync vs trl-grpo", "asyncrl-async-loglinear vs trl-grpo",
                          "asyncrl-async-loglinear vs asyncrl-sync"}
    assert comps["asyncrl-async-loglinear vs asyncrl-sync"]["samples_per_s"]["geomean"] == pytest.approx(1.28)
    assert summary["samples_per_s_ratio_vs_trl"] == pytest.approx(1.6)  # 40 s / 25 s in both repeats
    assert all(m["share_of_ideal"] is None and m["ideal"] is None for c in comps.values() for m in c.values())
    assert "defines no ideal" in summary["speed"]["ideal"]


def test_the_headline_ratios_under_repeats_are_paired_over_every_repeat(tmp_path):
    # --ks 4 with two repeats: sync 100 s, A-3PO 80 then 100 s, recompute 100 then 80 s; per K the
    # speed-ups are geometric means over the pairs: √(1.25 × 1) = 1.118 against sync and √(1.25 × 0.8) = 1
    # against recompute (repeat 1 alone would say 1.25 and 1.25)
    runs = []
    for r, (ll, rec) in enumerate([(80.0, 100.0), (100.0, 80.0)], start=1):
        runs += [_run("sync", 0, r, 100.0, 0.6), _run("async-loglinear-k4", 0, r, ll, 0.5),
                 _run("async-recompute-k4", 0, r, rec, 0.5)]
    summary = write_report(tmp_path, {**_study(1), "runs": runs})
    row = summary["by_k"]["4"]
    assert row["speedup_vs_sync"] == pytest.approx(1.25 ** 0.5) and row["speedup_vs_recompute"] == pytest.approx(1.0)
    assert "(2 repeats: below the 5-repeat protocol)" in (tmp_path / "table.md").read_text().split("\n\n")[1]
