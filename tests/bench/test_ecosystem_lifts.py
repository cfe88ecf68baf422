"""The ecosystem lifts (benchmarks/results/2026-11-28-ecosystem-lifts): the README's verdicts are what
the committed runs and the pre-registered criterion give (the z is worked by hand in
test_learning_plans.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench.lift import run_dir_lift_z

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-11-28-ecosystem-lifts"
# the pre-registered one-sided bars (prereg.md): one GEM configuration, two reasoning-gym ones
# (Bonferroni), three if the fallback ran
BARS = {"gem-guess": 1.96, "rg-legs": 2.24, "rg-family": 2.24, "rg-legs1": 2.39}


def _runs() -> list[str]:
    return sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))


def test_the_committed_runs_are_the_preregistered_ones():
    runs = _runs()
    assert runs, "no committed runs"
    for run in runs:
        config, mode = run.rsplit("-", 1)
        assert config in BARS and mode in {"sync", "async"}, run
        summary = json.loads((RESULTS / run / "summary.json").read_text())
        assert summary["steps"] == 50 and summary["seed"] == 0, run


@pytest.mark.parametrize("config", sorted(BARS))
def test_the_readme_verdict_is_the_criterions(config):
    runs = {mode: RESULTS / f"{config}-{mode}" for mode in ("sync", "async")}
    if not all((r / "summary.json").exists() for r in runs.values()):
        pytest.skip(f"{config} did not run in both modes")
    zs = [run_dir_lift_z(run) for run in runs.values()]
    readme = (RESULTS / "README.md").read_text()
    verdict = "lifts" if min(zs) > BARS[config] else "does not lift"
    assert f"`{config}` {verdict}" in readme, (config, zs)
    for z in zs:
        assert f"{z:+.2f}" in readme, (config, z)
