"""The short-warm-start lifts (benchmarks/results/2026-11-28-short-start-lifts): the committed runs
are the pre-registered ones, the README's verdict for each configuration is the criterion's (every
one of its four runs above z = 1.96), and the fixed-answer baseline's letter choice, worked by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results" / "2026-11-28-short-start-lifts"
BAR = 1.96  # one-sided 0.025 for each run; all four must pass (an intersection-union test)
# config -> (warm-start steps, RL steps, eval problems), as prereg.md fixes them
PLAN = {"gem-short": (25, 50, 200), "rg-spell": (100, 150, 500)}
RUNS = [f"{config}-{mode}-s{seed}" for config in PLAN for mode in ("sync", "async") for seed in (1, 2)]


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_best_constant_by_hand():
    best = _module("rg_constant_baseline").best_constant
    # position 0: "t" earns 1/3 (tac) + 1/4 (tsop) against "g" 1/3 (god): "t"; positions 1 and 2:
    # ties at 1/3 ("a"/"o", "c"/"d") go to the first letter in order; position 3: only "p"
    assert best(["tac", "god", "tsop"]) == "tacp"
    assert best(["ab"]) == "ab"


def _committed() -> list[str]:
    return sorted(p.parent.name for p in RESULTS.glob("*/summary.json"))


def test_the_committed_runs_are_the_preregistered_ones():
    runs = _committed()
    if not runs:
        pytest.skip("no runs committed yet")
    assert set(runs) <= set(RUNS), sorted(set(runs) - set(RUNS))
    for run in runs:
        config_name, mode, seed = run.rsplit("-", 2)
        pretrain_steps, rl_steps, n_eval = PLAN[config_name]
        config = yaml.safe_load((RESULTS / run / "config.yaml").read_text())
        summary = json.loads((RESULTS / run / "summary.json").read_text())
        assert summary["steps"] == rl_steps and summary["seed"] == int(seed[1:]), run
        assert config["pretrain"]["steps"] == pretrain_steps and config["pretrain"]["seed"] == 0, run
        assert config["eval"]["n_problems"] == n_eval and config["trainer"]["lr"] == 5e-5, run
        assert config["run"]["mode"] == mode, run


@pytest.mark.parametrize("config", sorted(PLAN))
def test_the_readme_verdict_is_the_criterions(config):
    runs = [RESULTS / r for r in RUNS if r.startswith(config)]
    if not all((r / "summary.json").exists() for r in runs):
        pytest.skip(f"{config}: not all four runs are committed")
    summary_module = _module("agents_summary")
    zs = []
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        zs.append(summary_module.lift_z(summary["initial_eval_reward"], summary["final_eval_reward"],
                                        summary_module.eval_problems(run), *summary_module.reward_bounds(run)))
    readme = (RESULTS / "README.md").read_text()
    verdict = "lifts" if min(zs) > BAR else "does not lift"
    assert f"`{config}` {verdict}" in readme, (config, zs)
    for z in zs:
        assert f"{z:+.2f}" in readme, (config, z)
