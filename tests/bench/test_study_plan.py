"""A study's plan: parsed and checked before any run, frozen into its folder, and the report gives
verdicts for the plan's one Holm family only."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench.plan_file import PLAN_COPY, PlanError, freeze_plan, load_plan, parse_plan, stored_plan
from benchmarks.bench.study_report import build_study, eval_auc
from cli_forks import checkout_env  # tests/: the checkout on PYTHONPATH

PLAN = """\
name: smoke
question: Does A-3PO at K = 2 keep sync's reward?
common: {eval.every: 4}
seeds: 4
warm_starts: 2
arms:
  sync: {run.mode: sync}
  a3po: {run.mode: simulated, async.lag: 2, trainer.prox: loglinear, loss.name: decoupled}
  recompute: {run.mode: simulated, async.lag: 2, trainer.prox: recompute, loss.name: decoupled}
primary:
  endpoint: final_eval_reward
  margin: 0.03
  family: [a3po - sync, recompute - sync]
exploratory: [a3po - recompute]
"""


def _plan_file(tmp_path: Path, text: str = PLAN) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(text)
    return path


def test_a_plan_parses_with_its_family_and_hash(tmp_path):
    plan = load_plan(_plan_file(tmp_path))
    assert [c.label for c in plan.family] == ["a3po - sync", "recompute - sync"]
    assert plan.seeds == 4 and plan.warm_starts == 2 and plan.test == "welch" and len(plan.sha256) == 64
    assert stored_plan({"plan": plan.as_dict()}) == plan  # what results.json keeps is the whole plan


@pytest.mark.parametrize("edit, message", [
    (("family: [a3po - sync, recompute - sync]", "family: [a3po - syn]"), "primary.family[0]: unknown arm 'syn'"),
    (("family: [a3po - sync, recompute - sync]", "family: [a3po-sync]"), "is not \"arm - reference\""),
    (("family: [a3po - sync, recompute - sync]", "family: []"), "name at least one comparison"),
    (("endpoint: final_eval_reward", "endpoint: reward"), "primary.endpoint: 'reward' is not one of"),
    (("seeds: 4", "seeds: 0"), "seeds: must be >= 1"),
    (("seeds: 4", "seeds: 4\nsteps: 3"), "unknown field 'steps'"),
    (("warm_starts: 2", "warm_starts: two"), "warm_starts: must be an integer"),
    (("margin: 0.03", "margin: -1"), "primary.margin: must be >= 0"),
    (("warm_starts: 2", "warm_starts: 2\nfirst_warm_start: -3"), "first_warm_start: must be >= 0"),
])
def test_a_bad_plan_is_one_line_naming_the_file_and_field(tmp_path, edit, message):
    path = _plan_file(tmp_path, PLAN.replace(*edit))
    with pytest.raises(PlanError) as err:
        load_plan(path)
    assert message in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)


def test_the_plan_is_frozen_before_the_first_run(tmp_path):
    path = _plan_file(tmp_path)
    out = tmp_path / "study"
    freeze_plan(path, load_plan(path), out)
    assert (out / PLAN_COPY).read_text() == PLAN
    freeze_plan(path, load_plan(path), out)  # the same plan again: a resumed study
    (tmp_path / "other").mkdir()
    changed = _plan_file(tmp_path / "other", PLAN.replace("margin: 0.03", "margin: 0.05"))
    with pytest.raises(PlanError, match="was started under another plan"):
        freeze_plan(changed, load_plan(changed), out)


def _run(arm: str, seed: int, curve: list[float]) -> dict:
    history = [[4 * i, r] for i, r in enumerate(curve)]
    return {"cell": f"{arm}-s{seed}", "method": arm, "seed": seed, "params": {"arm": arm, "warm_start": seed % 2},
            "summary": {"final_eval_reward": curve[-1], "eval_history": history}, "metrics": []}


def test_eval_auc_is_the_curve_mean_by_the_trapezoid_rule():
    assert eval_auc(_run("a", 0, [0.2, 0.4, 0.4])) == pytest.approx((0.3 * 4 + 0.4 * 4) / 8)
    assert eval_auc(_run("a", 0, [0.2])) != eval_auc(_run("a", 0, [0.2]))  # NaN: one point has no area


def test_the_report_gives_verdicts_for_the_family_only(tmp_path):
    plan = load_plan(_plan_file(tmp_path))
    runs = [_run("sync", s, [0.2, 0.5 + 0.01 * s]) for s in range(4)]
    runs += [_run("a3po", s, [0.2, 0.2 + 0.01 * s]) for s in range(4)]  # 30 points under sync
    runs += [_run("recompute", s, [0.2, 0.5 + 0.01 * ((s + 1) % 4)]) for s in range(4)]
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": runs}, tmp_path, {})
    # recompute's seeds are sync's values in another order: equal means, spread 1 point, margin 3
    assert extra["verdicts"] == {"a3po - sync": "differs", "recompute - sync": "equivalent"}
    # two tests in the family: Holm doubles the smaller p
    first = extra["primary"][0]
    assert first["p_holm"] == pytest.approx(min(1.0, 2 * first["p"]))
    assert {row["verdict"] for row in extra["exploratory"]} == {"exploratory"}
    assert {(row["comparison"], row["endpoint"]) for row in extra["exploratory"]} == {
        ("a3po - sync", "eval_auc"), ("recompute - sync", "eval_auc"),
        ("a3po - recompute", "final_eval_reward"), ("a3po - recompute", "eval_auc")}
    assert "## Exploratory (no verdicts; p-values unadjusted)" in table
    assert (tmp_path / "fig1_eval_reward.png").exists()


def _bench(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "benchmarks", "study", *args], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=checkout_env())


def test_cells_share_warm_starts_by_seed_block_and_the_plan_fixes_seeds(tmp_path):
    _plan_file(tmp_path)
    proc = _bench(tmp_path, "--plan", "plan.yaml", "--list")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 * 4
    blocks = {line.split()[0]: line.split("pretrain.seed=")[1].split()[0] for line in lines}
    assert blocks["sync-s0"] == blocks["a3po-s0"] == blocks["sync-s2"] == "0" and blocks["sync-s3"] == "1"
    assert not (tmp_path / "runs").exists()  # --list runs and freezes nothing
    for args, message in ((("--plan", "plan.yaml", "--seeds", "2"), "--seeds: a study runs the seeds its plan fixes"),
                          (("--list",), "--plan: the study suite needs a plan file"),
                          (("--plan", "nope.yaml"), "--plan: cannot read nope.yaml")):
        proc = _bench(tmp_path, *args)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"benchmarks: {proc.stderr.strip()[12:]}"]
        assert message in proc.stderr


def test_fresh_warm_starts_begin_at_first_warm_start_and_keep_their_block(tmp_path):
    _plan_file(tmp_path, PLAN.replace("warm_starts: 2", "warm_starts: 2\nfirst_warm_start: 100"))
    plan = load_plan(tmp_path / "plan.yaml")
    assert [plan.pretrain_seed(s) for s in range(4)] == [100, 101, 100, 101]
    assert stored_plan({"plan": plan.as_dict()}) == plan
    assert "first_warm_start" not in load_plan(_plan_file(tmp_path)).as_dict()  # older studies' records unchanged
    _plan_file(tmp_path, PLAN.replace("warm_starts: 2", "warm_starts: 2\nfirst_warm_start: 100"))
    proc = _bench(tmp_path, "--plan", "plan.yaml", "--list")
    assert proc.returncode == 0, proc.stderr
    seeds = {line.split()[0]: line.split("pretrain.seed=")[1].split()[0] for line in proc.stdout.splitlines()}
    assert seeds["sync-s0"] == seeds["a3po-s2"] == "100" and seeds["recompute-s3"] == "101"


def test_a_paired_plan_pairs_by_seed(tmp_path):
    from scipy.stats import ttest_rel

    plan = load_plan(_plan_file(tmp_path, PLAN.replace("margin: 0.03", "margin: 0.03\n  test: paired")))
    seed_effect = [0.0, 0.3, -0.2, 0.1]  # shared by both arms of a seed: pairing removes it
    runs = [_run("sync", s, [0.2, 0.5 + seed_effect[s]]) for s in range(4)]
    runs += [_run("a3po", s, [0.2, 0.48 + seed_effect[s] + 0.005 * s]) for s in range(4)]
    runs += [_run("recompute", s, [0.2, 0.5 + seed_effect[s]]) for s in range(4)]
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": runs}, tmp_path, {})
    first = extra["primary"][0]
    a3po = [0.48 + seed_effect[s] + 0.005 * s for s in range(4)]
    assert first["test"] == "paired" and first["p"] == pytest.approx(
        ttest_rel(a3po, [0.5 + e for e in seed_effect]).pvalue)
    assert first["verdict"] == "differs"  # 2 points with a 0.6-point spread of differences, Welch could not
    assert "paired t by seed" in table
