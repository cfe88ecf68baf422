"""The README's environment-latency table is read from the committed suite
(benchmarks/results/2026-12-06-env-latency-http): each geometric mean and paired interval, the share of
the ideal gain, the pairs behind them, and the ranges the summary sentence states."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-12-06-env-latency-http"
README = " ".join((ROOT / "README.md").read_text().split())


def _arm(delay: str, arm: str) -> dict:
    return json.loads((RESULTS / "summary.json").read_text())[f"calculator-m{delay}"]["arms"][arm]


def _cell(stats: dict) -> str:
    return f"{stats['geomean']:.2f}× [{stats['ci_low']:.2f}, {stats['ci_high']:.2f}]"


def test_every_figure_in_the_readme_table_comes_from_five_pairs():
    for delay in ("0.1", "0.5", "2"):
        default, overlap = _arm(delay, "async4"), _arm(delay, "asyncw4")
        shares = [round(100 * x) for x in default["share_of_ideal_gain"]]
        row = f"| {delay} s | {_cell(default['paired'])} | {min(shares)}-{max(shares)} % | {_cell(overlap['paired'])} |"
        assert row in README, row
        assert default["paired"]["n"] == overlap["paired"]["n"] == 5
    for delay in ("0.1", "0.5"):
        trl = _arm(delay, "trl")
        assert trl["paired"]["n"] == 5 and f"| {_cell(trl['paired'])} |" in README


def test_the_summary_ranges():
    default = [_arm(d, a)["paired"]["geomean"] for d in ("0.1", "0.5", "2") for a in ("async2", "async4")]
    overlap = [_arm(d, "asyncw4")["paired"]["geomean"] for d in ("0.1", "0.5", "2")]
    assert f"{min(default):.1f}-{max(default):.1f}× sync's speed by default" in README
    assert f"{min(overlap):.1f}-{max(overlap):.1f}× with W = K = 4" in README
    shares = [x for d in ("0.1", "0.5", "2") for a in ("async2", "async4") for x in _arm(d, a)["share_of_ideal_gain"]]
    assert f"async realises {round(100 * min(shares))}-{round(100 * max(shares))} % of that gain" in README
