"""Drops of the eval reward along the way (benchmarks.bench.study_drops): counted by hand on curves
written here, on the committed agent study's data, in a planned study's report; and the plan that
re-runs the agent suite with an alpha-floor arm (benchmarks/plans/2026-12-06-agent-floor.yaml)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from benchmarks.bench import stats as S
from benchmarks.bench.plan_file import load_plan, parse_plan
from benchmarks.bench.study_drops import DROP, arm_drops, drops, late_drops
from benchmarks.bench.study_report import build_study
from benchmarks.bench.suites import CellRequest, build_cells

ROOT = Path(__file__).resolve().parents[2]
AGENT = ROOT / "benchmarks" / "results" / "2026-11-28-agent"
FLOOR_PLAN = ROOT / "benchmarks" / "plans" / "2026-12-06-agent-floor.yaml"


def _run(arm: str, seed: int, curve: list[float], every: int = 10) -> dict:
    history = [[every * i, r] for i, r in enumerate(curve)]
    return {"cell": f"{arm}-s{seed}", "method": arm, "seed": seed, "params": {"arm": arm, "warm_start": seed % 2},
            "summary": {"final_eval_reward": curve[-1], "eval_history": history}, "metrics": []}


def test_a_drop_is_a_fall_of_more_than_five_points_between_consecutive_evaluations():
    assert DROP == 0.05
    # 0.50 -> 0.60 rises; 0.60 -> 0.54 falls 6 points (a drop); 0.54 -> 0.49 falls exactly 5 (not one,
    # though 0.54 - 0.49 is 0.05000000000000004 in floats); 0.49 -> 0.20 falls 29 (a drop)
    found = drops([(0, 0.50), (10, 0.60), (20, 0.54), (30, 0.49), (40, 0.20)])
    assert [(d["from"], d["to"]) for d in found] == [(10, 20), (30, 40)]
    assert [d["fall"] for d in found] == pytest.approx([0.06, 0.29])
    assert drops([(0, 0.65), (10, 0.60)]) == [] and drops([(0, 0.6)]) == [] and drops([]) == []
    # a slow slide of 4 points a step is no drop: only consecutive evaluations are compared
    assert drops([(0, 0.6), (10, 0.56), (20, 0.52), (30, 0.48)]) == []


def test_an_arm_counts_runs_drops_and_windows():
    runs = [_run("a", 0, [0.5, 0.6, 0.4, 0.6, 0.3]),  # two drops: 10-20 (20 points), 30-40 (30)
            _run("a", 1, [0.5, 0.6, 0.65, 0.7, 0.7]),  # none
            _run("a", 2, [0.5, 0.6, 0.65, 0.58, 0.6])]  # one: 20-30 (7 points)
    runs[1]["summary"]["eval_history"].insert(2, [15, float("nan")])  # a missing evaluation is skipped
    count = arm_drops(runs)
    assert (count["runs"], count["runs_with_drop"], count["drops"]) == (3, 2, 3)
    assert count["windows"] == {"10-20": 1, "20-30": 1, "30-40": 1}
    assert count["largest"] == pytest.approx(0.3)
    assert [(d["seed"], d["from"]) for d in count["list"]] == [(0, 10), (0, 30), (2, 20)]
    assert arm_drops([runs[1]])["largest"] == 0.0 and arm_drops([])["runs_with_drop"] == 0


def test_the_committed_agent_study_has_the_audits_drops():
    """The 2026-11-28 agent study is the agent suite's folder, not a plan study's: its runs' eval
    histories go through the same function."""
    runs = json.loads((AGENT / "results.json").read_text())["runs"]
    counts = late_drops(S.group_by_method(runs))["arms"]
    a3po = {arm: counts[arm] for arm in counts if arm.startswith("async-loglinear")}
    assert len(a3po) == 3 and all(c["runs"] == 10 for c in counts.values())
    # the audit: three A-3PO runs fell by more than 5 points between steps 30 and 40, one per K
    assert sum(c["runs_with_drop"] for c in a3po.values()) == 3
    assert all(c["windows"] == {"30-40": 1} for c in a3po.values())
    assert {(arm, c["list"][0]["seed"]) for arm, c in a3po.items()} == {
        ("async-loglinear-k1", 0), ("async-loglinear-k2", 6), ("async-loglinear-k4", 1)}
    assert a3po["async-loglinear-k4"]["largest"] == pytest.approx(0.591 - 0.107, abs=0.001)
    assert counts["sync"]["drops"] == 0  # none of sync's, at any step
    # beside the audit's count: recompute seed 8 fell from 0.58 to 0.25 between steps 10 and 20
    assert counts["async-recompute-k2"]["windows"] == {"10-20": 1}
    assert counts["async-recompute-k2"]["list"][0]["seed"] == 8


PLAN = {"name": "t", "seeds": 2, "warm_starts": 2, "arms": {"sync": {}, "a3po": {}},
        "primary": {"endpoint": "final_eval_reward", "test": "paired", "family": ["a3po - sync"]}}


def test_a_study_report_counts_drops_when_runs_evaluate_along_the_way(tmp_path):
    plan = parse_plan(PLAN)
    runs = [_run("sync", s, [0.5, 0.6, 0.62]) for s in range(2)]
    runs += [_run("a3po", 0, [0.5, 0.6, 0.3]), _run("a3po", 1, [0.5, 0.61, 0.6])]
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": runs}, tmp_path, {})
    assert extra["late_drops"]["drop"] == DROP
    assert extra["late_drops"]["arms"]["a3po"]["runs_with_drop"] == 1
    assert extra["late_drops"]["arms"]["sync"]["drops"] == 0
    assert "## Drops along the way (secondary; descriptive)" in table
    assert "| a3po | 2 | 1 | 1 | 10-20: s0 | 30.0 |" in table and "| sync | 2 | 0 | 0 | none | – |" in table
    # start and end only: nothing along the way, no section, no key
    short = [_run(r["method"], r["seed"], [0.5, r["summary"]["final_eval_reward"]]) for r in runs]
    extra, table, _ = build_study({"suite": "study", "plan": plan.as_dict(), "runs": short}, tmp_path, {})
    assert "late_drops" not in extra and "Drops along the way" not in table


def _config(config: str | None, args) -> dict:
    from asyncrl.runtime.validate import load_run_config

    data = load_run_config(config, [*args, "run.progress=false", "run.report_to=[]"]).to_dict()
    data["run"].pop("name"), data["run"].pop("out_dir")
    return data


def test_the_agent_floor_plan_runs_the_agent_suites_setting():
    plan = load_plan(FLOOR_PLAN)
    assert (plan.seeds, plan.warm_starts, plan.test, plan.margin) == (12, 4, "paired", 0.03)
    assert [c.label for c in plan.family] == ["a3po - sync", "a3po_floor - sync", "a3po_floor - a3po"]
    cells = {c.name: c for c in build_cells("study", CellRequest(plan=str(FLOOR_PLAN)))}
    suite = {c.name: c for c in build_cells("agent", CellRequest(seeds=6, ks=[4], methods=["sync", "async-loglinear"]))}
    # what the plan changes: 80 steps, pretrain.seed = s % 4; the floor arm is A-3PO's cell with its prox
    for mine, theirs, extra in (("sync-s5", "sync-s5", ()), ("a3po-s5", "async-loglinear-k4-s5", ()),
                                ("a3po_floor-s5", "async-loglinear-k4-s5",
                                 ("trainer.prox=loglinear_floor", "trainer.prox_params.alpha_min=0.5"))):
        want = _config(suite[theirs].config, [*suite[theirs].overrides, *extra, "trainer.steps=80", "pretrain.seed=1"])
        got = _config(cells[mine].config, cells[mine].overrides)
        assert got == want and got["trainer"]["steps"] == 80 and got["eval"]["every"] == 10, mine
        assert cells[mine].config == suite[theirs].config and got["pretrain"]["seed"] == 5 % 4


def test_the_floor_binds_at_k4_only_above_one_quarter():
    from asyncrl.objectives.a3po import staleness_alpha
    from asyncrl.objectives.prox.loglinear_floor import floored_alpha

    versions = torch.tensor([[4, 3, 2, 1, 0]])  # staleness 0..4 at version 4: all a K = 4 run trains
    assert torch.equal(floored_alpha(versions, 4, 0.25), staleness_alpha(versions, 4))  # A-3PO exactly
    assert floored_alpha(versions, 4, 0.5).tolist() == [[1.0, 1.0, 0.5, 0.5, 0.5]]  # binds at d = 3, 4
    plan = load_plan(FLOOR_PLAN)
    floor, k = plan.arms["a3po_floor"]["trainer.prox_params.alpha_min"], plan.arms["a3po_floor"]["async.max_staleness"]
    assert floor > 1 / k  # else the floor arm would repeat the a3po arm
