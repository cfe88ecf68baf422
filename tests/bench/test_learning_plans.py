"""The learning studies' plans (benchmarks/plans: agents, GEM, reasoning-gym, ecosystem and
short-start lifts, harnesses): every plan parses and expands to its runs; the ones that replaced a
shell script make the runs that script made; a lift plan's bar parses, a bad one is one line, and
the report says pass or fail per arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncrl.tracking.metrics import json_safe

from benchmarks.bench.lift import eval_lift, lift_z, reward_bounds
from benchmarks.bench.plan_file import PlanError, load_plan, stored_plan
from benchmarks.bench.study_report import build_study, headline_study
from benchmarks.bench.suite_study import REPO, in_repo
from benchmarks.bench.suites import CellRequest, build_cells

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "benchmarks" / "plans").glob("*.yaml"))
SYNC = ["run.mode=sync", "trainer.prox=behav", "loss.name=ppo"]  # sync GRPO
ASYNC = ["run.mode=async"]  # and its async A-3PO, the defaults
EXAMPLES = f"{ROOT}/examples"
# what the retired scripts passed to `asyncrl train` (besides run.out_dir/name/progress), per run
SCRIPT_RUNS = {
    "agents-calculator-300.yaml": ("calculator-agent", {
        "sync-s0": ["trainer.steps=300", "eval.every=20", *SYNC], "async-s0": ["trainer.steps=300", "eval.every=20", *ASYNC]}),
    "harness-guess.yaml": ("guess-agent", {
        f"{mode}-s0": ["env.name=none", f"env.harness={EXAMPLES}/harness_guess.py:agent", "trainer.steps=40",
                       "eval.every=10", *extra] for mode, extra in (("sync", SYNC), ("async", ASYNC))}),
    "short-start-lifts.yaml": (None, {
        f"rg-spell-{mode}-s{seed}": ["task=reasoning_gym", "task.rg_tasks=[spell_backward]", "task.rg_system_prompt=",
                                     "task.rg_configs={spell_backward: {min_word_len: 3, max_word_len: 5}}",
                                     "task.rg_size=5000", "model.vocab_size=300", "pretrain.steps=100",
                                     "trainer.steps=150", "eval.every=50", "eval.n_problems=500", "trainer.lr=5e-5",
                                     "pretrain.seed=0", f"run.seed={seed}", *extra]
        for mode, extra in (("sync", SYNC), ("async", ASYNC)) for seed in (1, 2)}),
    "ecosystem-lifts.yaml": (None, {
        f"gem-guess-{mode}-s0": ["task=gem", "env.name=gem:game:GuessTheNumber-v0-hard", "env.max_turns=7",
                                 "env.turn_discount=0.8", "env.turn_tokens=12", "env.episode_tokens=320",
                                 "model.max_positions=512", "trainer.steps=50", "trainer.lr=5e-5", "eval.every=25",
                                 "eval.n_problems=200", "run.seed=0", *extra]
        for mode, extra in (("sync", SYNC), ("async", ASYNC))}),
}


def _cells(plan: Path) -> list:
    return build_cells("study", CellRequest(plan=str(plan)))


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.name)
def test_every_plan_parses_and_expands_to_its_runs(plan):
    parsed = load_plan(plan)
    assert stored_plan({"plan": parsed.as_dict()}) == parsed  # results.json keeps the whole plan
    cells = _cells(plan)
    assert len(cells) == len(parsed.arms) * parsed.seeds
    assert {c.seed for c in cells} == set(parsed.seed_ids)


def _config(config: str | None, args) -> dict:
    from asyncrl.runtime.validate import load_run_config

    data = load_run_config(config, [*args, "run.progress=false", "run.report_to=[]"]).to_dict()
    data["run"].pop("name"), data["run"].pop("out_dir")
    return data


@pytest.mark.parametrize("name", sorted(SCRIPT_RUNS))
def test_a_plan_makes_the_runs_its_script_made(name):
    config, runs = SCRIPT_RUNS[name]
    cells = {c.name: c for c in _cells(ROOT / "benchmarks" / "plans" / name)}
    assert set(runs) <= set(cells)
    for run, args in runs.items():
        assert cells[run].config == config
        assert _config(cells[run].config, cells[run].overrides) == _config(config, args), run


def test_the_arms_overrides_are_the_scripts():
    harness = {c.name: c.overrides for c in _cells(ROOT / "benchmarks" / "plans" / "harness-guess.yaml")}
    assert f"env.harness={REPO}/examples/harness_guess.py:agent" in harness["sync-s0"]
    assert {"run.mode=sync", "trainer.prox=behav", "loss.name=ppo"} <= set(harness["sync-s0"])
    assert "run.mode=async" in harness["async-s0"] and "trainer.prox=behav" not in harness["async-s0"]
    short = {c.name: c for c in _cells(ROOT / "benchmarks" / "plans" / "short-start-lifts.yaml")}
    assert sorted(short) == sorted(f"{cfg}-{mode}-s{seed}" for cfg in ("gem-short", "rg-spell")
                                   for mode in ("sync", "async") for seed in (1, 2))
    assert {"run.seed=2", "pretrain.seed=0", "pretrain.steps=25"} <= set(short["gem-short-async-s2"].overrides)
    assert short["rg-spell-sync-s1"].params["eval_problems"] == 500
    assert short["gem-short-sync-s1"].params["reward_low"] == -0.1  # GEM's malformed action


def test_a_repository_path_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert in_repo("examples/harness_guess.py:agent") == f"{REPO}/examples/harness_guess.py:agent"
    assert in_repo("my_pkg.mod:agent") == "my_pkg.mod:agent"  # a module path, not a file
    assert in_repo("nope/missing.py:agent") == "nope/missing.py:agent"  # not in the repository: as written
    assert in_repo(["examples/harness_guess.py:agent"]) == ["examples/harness_guess.py:agent"]


LIFT_PLAN = """\
name: lifts
seeds: {seeds}
arms:
  sync: {{run.mode: sync, trainer.prox: behav, loss.name: ppo}}
  async: {{run.mode: async}}
primary:
  endpoint: eval_lift
  bar: {bar}
"""


def _plan(tmp_path: Path, seeds="1", bar="0.15", extra="") -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(LIFT_PLAN.format(seeds=seeds, bar=bar) + extra)
    return path


def test_a_lift_plan_with_a_bar_parses(tmp_path):
    plan = load_plan(_plan(tmp_path, bar="{sync: 0.15, async: 0.1}", seeds="[1, 2]"))
    assert plan.endpoint == "eval_lift" and plan.bars == {"sync": 0.15, "async": 0.1}
    assert plan.family == () and plan.seed_ids == (1, 2) and plan.bar_over == "mean"
    assert stored_plan({"plan": plan.as_dict()}) == plan


@pytest.mark.parametrize("edit, message", [
    ({"bar": "fifteen"}, "primary.bar: must be a finite number"),
    ({"bar": ".nan"}, "primary.bar: must be a finite number"),
    ({"bar": "{sync: 0.15, asink: 0.1}"}, "primary.bar.asink: unknown arm 'asink'"),
    ({"bar": "{sync: true}"}, "primary.bar.sync: must be a finite number"),
    ({"extra": "  bar_over: median\n"}, "primary.bar_over: 'median' is not one of mean, each_seed"),
    ({"seeds": "[1, 1]"}, "seeds: a list must name at least one seed, each once"),
    ({"seeds": "[-1]"}, "seeds[0]: must be >= 0"),
    ({"extra": "  family: [async - sync]\n", "bar": "1.96"}, None),
])
def test_a_bad_bar_is_one_line_naming_the_file_and_field(tmp_path, edit, message):
    path = _plan(tmp_path, **edit)
    if message is None:  # a family beside a bar is fine on eval_lift; on eval_lift_z it is refused
        load_plan(path)
        path.write_text(path.read_text().replace("endpoint: eval_lift", "endpoint: eval_lift_z"))
        message = "primary.family: arms are compared in reward points"
    with pytest.raises(PlanError) as err:
        load_plan(path)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def _run(arm: str, seed: int, start: float, end: float) -> dict:
    return {"cell": f"{arm}-s{seed}", "method": arm, "seed": seed, "params": {"arm": arm, "warm_start": 0},
            "summary": {"initial_eval_reward": start, "final_eval_reward": end,
                        "eval_history": [[0, start], [20, (start + end) / 2], [40, end]]}, "metrics": []}


def test_the_report_says_pass_or_fail_per_arm(tmp_path):
    plan = load_plan(_plan(tmp_path))
    runs = [_run("sync", 0, 0.275, 0.450), _run("async", 0, 0.30, 0.40)]  # +17.5 and +10.0 points
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": runs}, tmp_path, {})
    assert extra["bar_verdicts"] == {"sync": "pass", "async": "fail"}
    assert extra["primary"] == [] and extra["verdicts"] == {}
    assert "## Bar (the study's verdicts)" in table and "| sync | 1 | s0: +17.5 | +17.5 | +15.0 | pass |" in table
    assert "Primary family" not in table and "no test" in table
    lines = headline_study(extra, {})
    assert lines[0] == "Verdict, sync on eval reward lift (last step minus step 0): pass (+17.5 points ≥ bar +15.0 points)"
    assert lines[1].endswith("fail (+10.0 points < bar +15.0 points)")


def test_a_bar_judges_the_mean_or_every_seed(tmp_path):
    runs = [_run("sync", 1, 0.2, 0.4), _run("sync", 2, 0.2, 0.3),  # +20, +10: mean 15
            _run("async", 1, 0.2, 0.36), _run("async", 2, 0.2, 0.37)]  # +16, +17
    mean = load_plan(_plan(tmp_path, seeds="[1, 2]"))
    extra, _, _ = build_study({"suite": "study", "plan": mean.as_dict(), "runs": runs}, tmp_path, {})
    assert extra["bar_verdicts"] == {"sync": "pass", "async": "pass"}
    each = load_plan(_plan(tmp_path, seeds="[1, 2]", extra="  bar_over: each_seed\n"))
    extra, _, _ = build_study({"suite": "study", "plan": each.as_dict(), "runs": runs}, tmp_path, {})
    assert extra["bar_verdicts"] == {"sync": "fail", "async": "pass"}
    extra, _, _ = build_study({"suite": "study", "plan": each.as_dict(), "runs": runs[2:]}, tmp_path, {})
    assert extra["bar_verdicts"] == {"sync": "not run", "async": "pass"}
    read_back = json.loads(json.dumps(json_safe(extra)))  # summary.json: NaN is null there
    assert headline_study(read_back, {})[0] == ("Verdict, sync on eval reward lift (last step minus step 0): "
                                                "not run (n/a points vs bar +15.0 points)")


def test_the_lift_and_its_z_by_hand():
    assert eval_lift(_run("a", 0, 0.25, 0.4)) == pytest.approx(0.15)
    no_summary = {"summary": {"eval_history": [[0, 0.1], [10, 0.3]]}}
    assert eval_lift(no_summary) == pytest.approx(0.2)  # from the curve when the summary lacks them
    # 0.5 -> 0.6 over 200 problems: SE bound sqrt((0.25 + 0.24) / 200) = 0.049497, z = 2.0203
    assert lift_z(0.5, 0.6, 200) == pytest.approx(2.0203, abs=1e-4)
    assert lift_z(0.6, 0.5, 200) == pytest.approx(-2.0203, abs=1e-4)
    assert lift_z(0.3, 0.3, 50) == 0.0 and lift_z(0.0, 1.0, 10) == float("inf")
    # a GEM game's rewards lie in [-0.1, 1]: SE bound sqrt((0.3 + 0.28) / 200)
    assert lift_z(0.5, 0.6, 200, *reward_bounds("gem:game:GuessTheNumber-v0-easy")) == pytest.approx(1.8570, abs=1e-4)
    assert reward_bounds("") == (0.0, 1.0)
