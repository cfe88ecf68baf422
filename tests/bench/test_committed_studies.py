"""The committed studies under benchmarks/results: compact (summaries and one per-step table, no
run directories, no rendered report.html and no run logs: both are regenerated), and every one
re-renders from its stored data alone to the summary and table that are committed, so the numbers
quoted in the README are the ones the data give."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.bench import wording as W
from benchmarks.bench.runner import run_suite
from benchmarks.bench.speed_report import compare, paired_runs
from benchmarks.bench.study import RESULTS_FILE, STEPS_FILE

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
README = (ROOT / "README.md").read_text()
STUDIES = sorted(p.parent for p in RESULTS.glob(f"*/{RESULTS_FILE}"))
STUDY_FILES = {"README.md", "table.md", "summary.json", RESULTS_FILE, STEPS_FILE}
# rendered or logged, not data: `python -m benchmarks SUITE --report-only --out DIR` writes a study's
# report.html again from the files above; the run logs (*.log) are in no study's data
GENERATED = ("report.html", ".log")


def test_the_studies_are_compact():
    tracked = subprocess.run(["git", "ls-files", str(RESULTS)], capture_output=True, text=True, cwd=ROOT)
    if tracked.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / line for line in tracked.stdout.splitlines()]
    # 301 with the K = 16 study; run directories would add hundreds. The short-warm-start lifts of
    # 2026-11-28 add 26 (eight runs of config, summary and per-step table, the plan and the README);
    # 27 rendered reports and run logs left on 2026-12-05 (365 files): room for a few studies more.
    # 405 on 2026-12-06 with the two speed studies under the repeats protocol (11 files each with
    # their figures); the bar moved to 450 for the studies issue 56 still runs (a study adds 5-20
    # files, a run directory hundreds)
    assert len(files) <= 450
    assert not [f for f in files if f.name.endswith(GENERATED)]
    # about 16 MB on 2026-11-26, 7.6 MB of it the two largest studies' per-step tables (atlas, power);
    # the pre-registered staleness study of 2026-11-27 (lr grid, 140 runs at K = 16) adds about 3.5 MB
    # the agent suite's study of 2026-11-28 (50 multi-turn runs) adds about 1.3 MB; without the
    # rendered reports and run logs (3.7 MB) 23.0 MB on 2026-12-05, 15.9 MB of it per-step tables;
    # those xz-compressed since: 19.4 MB; the atlas and the 2.5e-5 K = 16 tables compacted to 4 significant
    # digits (--steps-digits 4) on 2026-12-06: 17.7 MB with the 1.25e-5 study, 18.4 MB with the two
    # speed studies under the repeats protocol; 19.9 MB on 2026-12-07 with the calculator's fresh warm
    # starts and A-3PO against recompute under the protocol, 19.0 MB once the 2026-11-26 power table was
    # compacted too and recompute's second seed added. The bar is the (20 MB)
    assert sum(f.stat().st_size for f in files if f.exists()) <= 20 * 10**6
    assert not [f for f in files if "/runs/" in str(f)]
    assert {p.name for p in STUDIES} >= {"2026-11-25-atlas-full", "2026-11-25-a3po-stale", "2026-11-25-control"}
    for study in STUDIES:
        assert STUDY_FILES <= {p.name for p in study.iterdir()}, study
        assert "metrics" not in json.loads((study / RESULTS_FILE).read_text())["runs"][0]


@pytest.fixture(scope="module", params=STUDIES, ids=lambda p: p.name)
def rerendered(request, tmp_path_factory) -> tuple[dict, Path, Path]:
    """The committed study re-rendered in a scratch folder from its results.json and steps table."""
    out = tmp_path_factory.mktemp(request.param.name)
    for name in (RESULTS_FILE, STEPS_FILE):
        shutil.copy(request.param / name, out / name)
    suite = json.loads((out / RESULTS_FILE).read_text())["suite"]
    run_suite(suite, [], out, quick=False, command="", report_only=True)
    return json.loads((out / "summary.json").read_text()), request.param, out


def _same(got, want, where: str = "summary") -> None:
    """``got`` equals ``want``, floats within 1e-9 relative: numpy and scipy releases differ in the last
    bits of a t quantile or a sum's order, and the report rounds far above that."""
    if isinstance(want, dict) and isinstance(got, dict):
        assert set(got) == set(want), f"{where}: keys differ: {sorted(set(got) ^ set(want))}"
        for key in want:
            _same(got[key], want[key], f"{where}/{key}")
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), f"{where}: {len(got)} items, committed {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        assert got == pytest.approx(want, rel=1e-9, abs=1e-12, nan_ok=True), f"{where}: {got} != {want}"
    else:
        assert got == want, f"{where}: {got!r} != {want!r}"


def test_same_tells_a_last_bit_from_a_real_difference():
    _same({"a": [1.0546627864871474, "x"]}, {"a": [1.0546627864871476, "x"]})
    for got in ({"a": [1.0547, "x"]}, {"a": [1.0546627864871474, "y"]}, {"a": [1.0546627864871474]}, {"b": []}):
        with pytest.raises(AssertionError):
            _same(got, {"a": [1.0546627864871476, "x"]})


def test_a_study_rerenders_to_the_committed_report(rerendered):
    summary, study, out = rerendered
    _same(summary, json.loads((study / "summary.json").read_text()))
    assert (out / "table.md").read_text() == (study / "table.md").read_text()


def _pm(stat: dict) -> str:
    return W.mean_pm(stat["mean"], (stat["ci_high"] - stat["ci_low"]) / 2)


def _gap(stat: dict) -> str:
    return f"{100 * stat['mean']:+.1f} [{100 * stat['ci_low']:+.1f}, {100 * stat['ci_high']:+.1f}]".replace("-", "−")


def _readme_2026_11_25_a3po_stale(summary: dict, study: Path) -> None:
    """The staleness table's rewards, mean ± CI half-width."""
    for method in ("sync", "async-loglinear-k4", "async-recompute-k8"):
        assert _pm(summary["methods"][method]["final_eval_reward"]) in README, method


def _readme_2026_11_25_atlas_full(summary: dict, study: Path) -> None:
    """A-3PO against sync and against recompute at K = 16."""
    lag = summary["rows"]["lag"]["grid"]
    against_sync = lag["decoupled"]["16"]["gap_vs_sync"]
    against_rec = summary["rows"]["lag"]["a3po_vs_recompute"]["16"]
    assert _gap(against_sync) == "−20.8 [−39.7, −1.9]"  # Welch interval: deterministic, no resampling
    for text in (README, (study / "README.md").read_text()):
        claim = (f"{_gap(against_sync)} against sync (Holm p = {against_sync['p_holm']:.3f}, MDE "
                 f"{100 * against_sync['mde']:.1f}: {against_sync['verdict']})")
        assert claim in " ".join(text.split())
        assert _gap(against_rec) + " against recompute" in text
    # every configuration ran with 3 seeds: 109 configurations, 327 runs
    runs = json.loads((study / RESULTS_FILE).read_text())["runs"]
    configs = {(r["method"], json.dumps(r.get("params"), sort_keys=True)) for r in runs}
    assert (len(configs), len(runs)) == (109, 327) and "327 runs (109 configurations × 3 seeds)" in README


def _readme_2026_11_27_corrections_k16(summary: dict, study: Path) -> None:
    """The pre-registered family: gap, Holm p, MDE, verdict."""
    text = " ".join(README.split())
    for stat in summary["primary"]:
        arm, ref = stat["comparison"].split(" - ")
        holm = "< 0.001" if stat["p_holm"] < 0.001 else f"{stat['p_holm']:.3f}"
        verdict = {"equivalent": "equivalent within 3 points"}.get(stat["verdict"], stat["verdict"])
        cells = f"{_gap(stat)}{' vs sync' if ref == 'sync' else ''} | {holm} | {100 * stat['mde']:.1f} | "
        assert cells in text and verdict in text.split(cells, 1)[1][:40], stat["comparison"]
    for arm in ("sync", "a3po_floor", "vespo", "sapo"):
        assert _pm(summary["methods"][arm]["final_eval_reward"]) in README, arm
    # the mixed model (warm start as a random effect): which verdicts hold, and the ICC range
    mixed = summary["mixed_verdicts"]
    assert mixed["a3po_floor - sync"] == mixed["vespo - sync"] == "equivalent"
    assert mixed["a3po_floor - a3po"] == "differs"
    undecided = [c for c in ("dppo - sync", "recompute - sync", "a3po - sync", "sapo - sync") if mixed[c] == "undecided"]
    holm = sorted(stat["mixed"]["p_holm"] for stat in summary["primary"] if stat["comparison"] in undecided)
    assert len(undecided) == 4 and f"Holm-adjusted p is {holm[0]:.2f}-{holm[-1]:.2f}" in text
    iccs = [summary["warm_start_level"][arm]["final_eval_reward"]["icc"] for arm in summary["methods"]]
    assert f"ICC {min(iccs):.2f}-{max(iccs):.2f}" in text
    gaps = {stat["comparison"]: -100 * stat["mean"] for stat in summary["primary"]}  # the headline
    assert (f"exact decoupled PPO loses {gaps['recompute - sync']:.1f} points to sync and A-3PO "
            f"{gaps['a3po - sync']:.1f}") in text


def _assert_sync_gaps_quoted(text: str, gaps: dict) -> None:
    """The K = 16 studies' other gaps to sync, quoted to one decimal after each arm's name."""
    for arm, gap in (("DPPO", "dppo - sync"), ("recompute", "recompute - sync"), ("A-3PO", "a3po - sync"),
                     ("SAPO", "sapo - sync")):
        assert f"{arm} " + f"{100 * gaps[gap]['mean']:.1f}".replace("-", "−") in text, arm


def _readme_2026_12_06_corrections_k16_lr5e_5(summary: dict, study: Path) -> None:
    """The same plan at 5e-5: its gaps and verdicts."""
    text = " ".join(README.split())
    gaps = {stat["comparison"]: stat for stat in summary["primary"]}
    assert all(gaps[c]["verdict"] == "differs" for c in gaps if c.endswith(" - sync"))
    assert "every arm differs from sync" in text and "no correction stays within 3 points" in text
    for comparison, words in (("a3po_floor - sync", "The α floor"), ("vespo - sync", "VESPO"),
                              ("a3po - recompute", "A-3PO"), ("a3po_floor - a3po", "the floor against A-3PO")):
        assert f"{words} {_gap(gaps[comparison])}" in text, comparison
    assert gaps["a3po - recompute"]["verdict"] == "differs" and gaps["a3po_floor - a3po"]["verdict"] == "undecided"
    _assert_sync_gaps_quoted(text, gaps)
    mixed = summary["mixed_verdicts"]
    assert [c for c, v in mixed.items() if v != "undecided"] == ["sapo - sync"] and mixed["sapo - sync"] == "differs"


def _readme_2026_12_06_corrections_k16_lr1_25e_5(summary: dict, study: Path) -> None:
    """The same plan at 1.25e-5."""
    text = " ".join(README.split())
    gaps = {stat["comparison"]: stat for stat in summary["primary"]}
    verdicts = {c: gaps[c]["verdict"] for c in gaps}
    assert verdicts == {"recompute - sync": "equivalent", "a3po - sync": "differs", "a3po_floor - sync": "equivalent",
                        "vespo - sync": "differs", "dppo - sync": "equivalent", "sapo - sync": "differs",
                        "a3po - recompute": "equivalent", "a3po_floor - a3po": "differs"}
    vespo = gaps["vespo - sync"]  # differs from 0, and inside the margin
    assert vespo["p_tost"] < 0.05 and -0.03 < vespo["ci_low"] < vespo["ci_high"] < 0
    for comparison, words in (("a3po_floor - sync", "floor"), ("vespo - sync", "VESPO"),
                              ("a3po - recompute", "A-3PO"), ("a3po_floor - a3po", "the floor")):
        assert f"{words} {_gap(gaps[comparison])}" in text, comparison
    _assert_sync_gaps_quoted(text, gaps)
    assert "they stay within 3 again (the floor −0.1, VESPO −1.6)" in text


def _readme_2026_12_06_agent_floor(summary: dict, study: Path) -> None:
    """The agent α-floor study: its three verdicts and each arm's runs with a drop, in the README and the
    study's own README."""
    text, own = " ".join(README.split()), " ".join((study / "README.md").read_text().split())
    gaps = {stat["comparison"]: stat for stat in summary["primary"]}
    assert {c: gaps[c]["verdict"] for c in gaps} == dict.fromkeys(gaps, "undecided")
    for comparison, words in (("a3po - sync", "A-3PO"), ("a3po_floor - sync", "the α floor 1/2"),
                              ("a3po_floor - a3po", "the floor against A-3PO")):
        stat = gaps[comparison]
        assert f"{words} {_gap(stat)} ({stat['verdict']})" in text, comparison
    arms = summary["late_drops"]["arms"]
    counts = ", ".join(f"{name} {arms[arm]['runs_with_drop']} of {arms[arm]['runs']}"
                       for arm, name in (("sync", "sync"), ("a3po", "A-3PO"), ("a3po_floor", "the floor")))
    assert f"Runs with a drop (more than 5 points between two evaluations): {counts}" in text
    assert f"runs with a drop: {counts}" in own


def _readme_2026_12_06_fresh_lifts_short_start(summary: dict, study: Path) -> None:
    """The short-start lifts on fresh warm starts: every arm passes, each task's lowest z as quoted."""
    text = " ".join(README.split())
    bar = {row["arm"]: row for row in summary["bar"]}
    assert {arm: row["verdict"] for arm, row in bar.items()} == dict.fromkeys(bar, "pass")
    lowest = [f"{min(bar[arm]['score'] for arm in arms):.2f}"
              for arms in (("gem-short-sync", "gem-short-async"), ("rg-spell-sync", "rg-spell-async"))]
    sentence = text.split("both lift again in every run: ", 1)[1]
    assert sentence.startswith("GEM ") and f"(lowest z {lowest[0]}), spell_backward " in sentence
    assert f"spell_backward +10.3 to +14.3 (lowest z {lowest[1]})" in sentence


def _readme_2026_12_06_fresh_lifts_calculator(summary: dict, study: Path) -> None:
    """The calculator on fresh warm starts: both arms pass on the mean, each mean and each warm start's
    lift as the README quotes them."""
    text = " ".join(README.split())
    bar = {row["arm"]: row for row in summary["bar"]}
    assert {arm: row["verdict"] for arm, row in bar.items()} == {"sync": "pass", "async": "pass"}
    assert all(row["over"] == "mean" for row in bar.values())
    sentence = text.split("the mean lift passes the bar in both modes, ", 1)[1]
    assert sentence.startswith(
        f"**sync {100 * bar['sync']['score']:+.1f} and async A-3PO {100 * bar['async']['score']:+.1f} points**")
    lifts = {arm: dict(row["by_seed"]) for arm, row in bar.items()}
    for seed in (1, 0, 2):  # the README's order: the warm start that lifts most first
        assert f"{100 * lifts['sync'][seed]:+.1f} and {100 * lifts['async'][seed]:+.1f} on" in sentence, seed


def _readme_2026_11_28_agent(summary: dict, study: Path) -> None:
    """Speed against sync, and the share of the ideal *gain*."""
    text = " ".join(README.split())
    ideal, arms = summary["ideal_overlap"], summary["arms"]
    ratio = {k: arms[f"async-loglinear-k{k}"]["samples_per_s_ratio"] for k in (1, 2, 4)}
    assert f"{ratio[1]:.2f}× (K = 1), {ratio[2]:.2f}× (K = 2) and {ratio[4]:.2f}× (K = 4)" in text
    gain = [round(100 * (r - 1) / (ideal - 1)) for r in ratio.values()]
    assert f"{min(gain):+d} % to {max(gain):+d} %".replace("-", "−") in text
    recompute = arms["async-recompute-k2"]["samples_per_s_ratio"]
    assert f"{recompute:.2f}× ({round(100 * (recompute - 1) / (ideal - 1)):+d} %)".replace("-", "−") in text


def _readme_2026_11_27_speed(summary: dict, study: Path) -> None:
    """The single-run figure the paired repeats replaced, quoted as replaced."""
    assert f"It replaces the {summary['speedup_vs_sync']:.2f}× of 2026-11-27" in " ".join(README.split())


def _speed_words(stats: dict) -> str:
    """"1.11× ... [1.07, 1.15] over 10": a paired speed figure as the README gives it."""
    return f"{stats['geomean']:.2f}× as fast as sync, 95 % paired interval [{stats['ci_low']:.2f}, {stats['ci_high']:.2f}]"


def _mean_range(study: Path, method: str, metric: str) -> str:
    """"149.8 [142.7, 154.7]": one arm's mean of a run summary metric over its runs, and its min-max."""
    values = [r["summary"][metric] for r in json.loads((study / RESULTS_FILE).read_text())["runs"]
              if r["method"] == method]
    return f"{sum(values) / len(values):.1f} [{min(values):.1f}, {max(values):.1f}]"


def _readme_2026_12_06_speed_a3po(summary: dict, study: Path) -> None:
    """The two-core speed headline under the protocol: ratio, interval, spread, share of the ideal gain,
    and each arm's mean train wall over its runs."""
    text = " ".join(README.split())
    stats = summary["speed"]["comparisons"]["async-loglinear vs sync"]["train_wall_s"]
    assert stats["repeats"] >= 5 and not stats["below_protocol"]
    assert f"A-3PO trains {_speed_words(stats)} over {stats['n']} pairs" in text
    assert f"every pair {stats['min']:.2f}-{stats['max']:.2f}×" in text
    share = [round(100 * v) for v in (stats["share_of_ideal"], *stats["share_ci"])]
    assert "{:+d} % [{:+d} %, {:+d} %] of the ideal gain".format(*share) in text
    assert f"perfect overlap would be {stats['ideal']:.2f}×" in text
    assert f"A-3PO is {stats['geomean']:.2f}× sync's speed" in text  # the first paragraph
    assert f"[{stats['ci_low']:.2f}, {stats['ci_high']:.2f}], 5 paired repeats of 2 seeds" in text
    for method in ("sync", "async-loglinear"):
        mean, spread = _mean_range(study, method, "train_wall_s").split(" ", 1)
        assert f"| {mean} s {spread} |" in text, method


def _readme_2026_12_07_speed_a3po_recompute(summary: dict, study: Path) -> None:
    """A-3PO against recompute under the protocol, in the intro and in the speed section: ratio,
    interval, spread, and each arm's mean train wall over its runs."""
    text = " ".join(README.split())
    stats = summary["speed"]["comparisons"]["async-loglinear vs async-recompute"]["train_wall_s"]
    assert stats["repeats"] >= 5 and not stats["below_protocol"]
    ratio, interval = f"{stats['geomean']:.2f}×", f"[{stats['ci_low']:.2f}, {stats['ci_high']:.2f}]"
    assert f"A-3PO trains {ratio} as fast as recompute, 95 % paired interval {interval} over {stats['n']} pairs" in text
    assert f"(every pair {stats['min']:.2f}-{stats['max']:.2f}×;" in text
    assert f"it trains {ratio} as fast end to end as recomputing it (95 % paired interval {interval}, 5 paired" in text
    runs = json.loads((study / RESULTS_FILE).read_text())["runs"]
    seeds = sorted({r["seed"] for r in runs})
    assert f"repeats of each of {['one', 'two', 'three'][len(seeds) - 1]} seed" in text
    per_seed = [compare(paired_runs([r for r in runs if r["seed"] == seed], "async-loglinear", "async-recompute"))
                ["train_wall_s"]["geomean"] for seed in seeds]  # the report's pair statistics, one seed at a time
    assert f"per seed {' and '.join(f'{ratio:.2f}×' for ratio in per_seed)};" in text
    for method, name in (("async-loglinear", "A-3PO"), ("async-recompute", "recompute")):
        mean, spread = _mean_range(study, method, "train_wall_s").split(" ", 1)
        assert f"{name} {mean} s {spread}" in text, method


def _readme_2026_12_06_speed_peer_trl(summary: dict, study: Path) -> None:
    """The TRL table under the protocol: both ratios against TRL with their intervals, async against
    sync, and each arm's mean samples/s over its repeats."""
    text = " ".join(README.split())
    comparisons = summary["speed"]["comparisons"]

    def figure(name: str) -> str:
        stats = comparisons[name]["samples_per_s"]
        assert stats["repeats"] >= 5 and not stats["below_protocol"], name
        return f"{stats['geomean']:.2f}×", f"[{stats['ci_low']:.2f}, {stats['ci_high']:.2f}]"

    ratio, interval = figure("asyncrl-sync vs trl-grpo")
    assert f"{ratio} TRL's samples per second (95 % paired interval {interval})" in text
    ratio, interval = figure("asyncrl-async-loglinear vs trl-grpo")
    assert f"its async mode **{ratio} ({interval})**" in text
    ratio, interval = figure("asyncrl-async-loglinear vs asyncrl-sync")
    assert f"async ÷ sync is {ratio} ({interval})" in text
    for method in ("trl-grpo", "asyncrl-sync", "asyncrl-async-loglinear"):
        assert f"| {_mean_range(study, method, 'samples_per_s')} |" in text, method


def _readme_2026_11_25_control(summary: dict, study: Path) -> None:
    """PPO-clip's and VACO's IQM at buffer 1 and 8."""
    agg = summary["aggregate"]
    for arm, (n1, n8) in {"ppo": ("0.26", "0.12"), "vaco": ("0.17", "0.21")}.items():
        assert (f"{agg[arm]['1']['iqm_final'][0]:.2f}", f"{agg[arm]['8']['iqm_final'][0]:.2f}") == (n1, n8)
        assert f"from {n1} to {n8}" in README, arm


README_CHECKS = {  # the committed study -> what the README quotes from it
    "2026-11-25-a3po-stale": _readme_2026_11_25_a3po_stale,
    "2026-11-25-atlas-full": _readme_2026_11_25_atlas_full,
    "2026-11-27-corrections-k16": _readme_2026_11_27_corrections_k16,
    "2026-12-06-corrections-k16-lr5e-5": _readme_2026_12_06_corrections_k16_lr5e_5,
    "2026-12-06-corrections-k16-lr1.25e-5": _readme_2026_12_06_corrections_k16_lr1_25e_5,
    "2026-11-28-agent": _readme_2026_11_28_agent,
    "2026-12-06-agent-floor": _readme_2026_12_06_agent_floor,
    "2026-12-06-fresh-lifts-short-start": _readme_2026_12_06_fresh_lifts_short_start,
    "2026-12-06-fresh-lifts-calculator": _readme_2026_12_06_fresh_lifts_calculator,
    "2026-11-27-speed": _readme_2026_11_27_speed,
    "2026-12-06-speed-a3po": _readme_2026_12_06_speed_a3po,
    "2026-12-06-speed-peer-trl": _readme_2026_12_06_speed_peer_trl,
    "2026-12-07-speed-a3po-recompute": _readme_2026_12_07_speed_a3po_recompute,
    "2026-11-25-control": _readme_2026_11_25_control,
}


def test_readme_numbers_come_from_the_studies(rerendered):
    summary, study, _ = rerendered
    check = README_CHECKS.get(study.name)
    if check is not None:
        check(summary, study)