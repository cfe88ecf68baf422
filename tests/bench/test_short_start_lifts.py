"""The short-warm-start lifts (benchmarks/results/2026-11-28-short-start-lifts): the committed runs
are the pre-registered ones, the README's verdict for each configuration is the criterion's (every
one of its four runs above z = 1.96), and the fixed-answer baseline's letter choice, worked by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import yaml

from benchmarks.bench.lift import run_dir_lift_z

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
    # credit is per letter of the word: "ab"'s letters earn 1/2 each, beating two five-letter words' 2/5
    assert best(["ab", "xyzwv", "xyzwu"]) == "abzwu"


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
    zs = [run_dir_lift_z(run) for run in runs]
    readme = (RESULTS / "README.md").read_text()
    verdict = "lifts" if min(zs) > BAR else "does not lift"
    assert f"`{config}` {verdict}" in readme, (config, zs)
    for z in zs:
        assert f"{z:+.2f}" in readme, (config, z)


def test_gem_episode_reader_by_hand(tmp_path):
    module = _module("gem_guess_episodes")
    hint = "\nuser: At turn {t}, you guessed {g}, and the target number is {d} than {g}.\nEnter your next guess.\nassistant: "
    # 5 -> higher (range 6..10): 8 inside; 8 -> lower (6..7): 9 outside
    episode = " \\boxed{5}" + hint.format(t=1, g=5, d="higher") + "\\boxed{8}" + hint.format(t=2, g=8, d="lower") + "\\boxed{9}"
    assert module.guesses_in_range(episode) == (1, 2)
    assert module.guesses_in_range(" \\boxed{5}") == (0, 0)
    (tmp_path / "problems.jsonl").write_text(json.dumps(
        {"completions": [episode, " \\boxed{5}boxed", " \\boxed{3}"], "rewards": [0.5, -0.1, 1.0]}) + "\n")
    stats = module.summarize(tmp_path)
    assert stats["malformed_end"] == pytest.approx(1 / 3) and stats["won"] == pytest.approx(1 / 3)
    assert stats["later_guesses_in_hint_range"] == 0.5


def test_spell_answer_reader_by_hand(tmp_path):
    module = _module("spell_backward_answers")
    rows = [{"answer": "tac", "completions": [" <answer>tac</answer>", " <answer>tx</answer>", " tac"],
             "rewards": [1.0, 1 / 3, 0.0]}]
    (tmp_path / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    stats = module.summarize(tmp_path)
    assert stats["tagged"] == pytest.approx(2 / 3) and stats["exact"] == pytest.approx(1 / 3)
    assert stats["first_letter_right"] == pytest.approx(2 / 3) and stats["distinct_answers"] == pytest.approx(2 / 3)
    assert stats["mean_reward"] == pytest.approx(4 / 9)
