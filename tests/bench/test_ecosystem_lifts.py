"""The ecosystem lifts (benchmarks/results/2026-11-28-ecosystem-lifts): the lift's z against its
standard-error bound, worked by hand, and the README's verdicts are what the committed runs and the
pre-registered criterion give."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-11-28-ecosystem-lifts"
# the pre-registered one-sided bars (prereg.md): one GEM configuration, two reasoning-gym ones
# (Bonferroni), three if the fallback ran
BARS = {"gem-guess": 1.96, "rg-legs": 2.24, "rg-family": 2.24, "rg-legs1": 2.39}


def _summary_module():
    spec = importlib.util.spec_from_file_location("agents_summary", ROOT / "benchmarks" / "agents_summary.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_lift_z_by_hand():
    lift_z = _summary_module().lift_z
    # 0.5 -> 0.6 over 200 problems: SE bound sqrt((0.25 + 0.24) / 200) = 0.049497, z = 2.0203
    assert lift_z(0.5, 0.6, 200) == pytest.approx(0.1 / math.sqrt(0.49 / 200), rel=1e-12)
    assert lift_z(0.5, 0.6, 200) == pytest.approx(2.0203, abs=1e-4)
    assert lift_z(0.6, 0.5, 200) == pytest.approx(-2.0203, abs=1e-4)  # a fall is negative
    assert lift_z(0.3, 0.3, 50) == 0.0
    assert lift_z(0.0, 1.0, 10) == math.inf  # no variance left: any rise is certain
    assert lift_z(0.1, 0.2, 800) > lift_z(0.1, 0.2, 200)  # more problems, smaller SE
    # a GEM game's rewards lie in [-0.1, 1]: 0.5 -> 0.6 over 200, SE bound sqrt((0.3 + 0.28) / 200)
    assert lift_z(0.5, 0.6, 200, -0.1, 1.0) == pytest.approx(0.1 / math.sqrt(0.58 / 200), rel=1e-12)
    assert lift_z(0.5, 0.6, 200, -0.1, 1.0) == pytest.approx(1.8570, abs=1e-4)


def test_reward_bounds_by_task(tmp_path):
    module = _summary_module()
    gem, rg = tmp_path / "gem", tmp_path / "rg"
    for run, env in ((gem, "gem:game:GuessTheNumber-v0-easy"), (rg, "")):
        run.mkdir()
        (run / "config.yaml").write_text(f"env:\n  name: '{env}'\neval:\n  n_problems: 200\n")
    assert module.reward_bounds(gem) == (-0.1, 1.0)
    assert module.reward_bounds(rg) == (0.0, 1.0)


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
    module = _summary_module()
    zs = []
    for run in runs.values():
        summary = json.loads((run / "summary.json").read_text())
        zs.append(module.lift_z(summary["initial_eval_reward"], summary["final_eval_reward"],
                                module.eval_problems(run), *module.reward_bounds(run)))
    readme = (RESULTS / "README.md").read_text()
    verdict = "lifts" if min(zs) > BARS[config] else "does not lift"
    assert f"`{config}` {verdict}" in readme, (config, zs)
    for z in zs:
        assert f"{z:+.2f}" in readme, (config, z)
