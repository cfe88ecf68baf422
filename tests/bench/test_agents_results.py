"""The README's agent numbers are the committed runs' (benchmarks/results/2026-11-27-agents), and the
calculator's 300-step runs meet the 15-point criterion written down before they ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-11-27-agents"


def _lift(run: str) -> float:
    summary = json.loads((RESULTS / run / "summary.json").read_text())
    return 100 * (summary["final_eval_reward"] - summary["initial_eval_reward"])


@pytest.mark.parametrize("run", ["guess-sync", "guess-async", "calculator-sync-300", "calculator-async-300",
                                 "calculator-sync", "calculator-async", "calculator-sync-120",
                                 "calculator-async-120"])
def test_the_readme_states_each_runs_lift(run):
    assert f"{_lift(run):.1f}" in (ROOT / "README.md").read_text(), run


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_calculator_meets_its_criterion_at_300_steps(mode):
    summary = json.loads((RESULTS / f"calculator-{mode}-300" / "summary.json").read_text())
    assert summary["steps"] == 300 and summary["seed"] == 0
    assert _lift(f"calculator-{mode}-300") >= 15.0
    steps = [json.loads(line) for line in (RESULTS / f"calculator-{mode}-300" / "steps.jsonl").read_text().splitlines()]
    evals = {r["step"]: r["eval_reward"] for r in steps if r.get("eval_reward") is not None}
    assert evals[0] == summary["initial_eval_reward"] and evals[300] == summary["final_eval_reward"]
