"""The agent suite (``python -m benchmarks agent``): its cells, its report on synthetic runs with every
number checked by hand, and one ``--quick`` run end to end."""

from __future__ import annotations

import json
import math
import os

import pytest
from cli_forks import run_bench  # tests/: the CLI forked from one imported copy

from benchmarks.bench.agent_report import ideal_overlap, token_staleness_shares
from benchmarks.bench.report import write_report
from benchmarks.bench.suites import build_cells
from asyncrl.config import load_config

from .test_bench_cli import BENCH_TINY, check_report

ARMS = ["sync", "async-loglinear-k1", "async-loglinear-k2", "async-loglinear-k4", "async-recompute-k2"]


# ---- cells -----------------------------------------------------------------------------------

def test_cells_are_arms_by_k_by_seed_from_the_guess_tail_preset():
    cells = build_cells("agent", seeds=2)
    assert [c.name for c in cells] == [f"{a}-s{s}" for s in (0, 1) for a in ARMS]
    assert all(c.config == "guess-tail" and f"run.seed={c.seed}" in c.overrides for c in cells)
    by_name = {c.name: c for c in cells}
    sync = load_config("guess-tail", list(by_name["sync-s0"].overrides))
    assert (sync.run.mode, sync.trainer.prox, sync.loss.name) == ("sync", "behav", "ppo")
    assert sync.task.name == "guess_tail" and sync.env.name == "guess" and sync.eval.cache_initial
    for k in (1, 2, 4):
        cfg = load_config("guess-tail", list(by_name[f"async-loglinear-k{k}-s1"].overrides))
        assert (cfg.run.mode, cfg.trainer.prox, cfg.loss.name) == ("async", "loglinear", "decoupled")
        assert (cfg.async_.max_staleness, cfg.async_.max_ahead, cfg.run.seed) == (k, k, 1)
    rec = by_name["async-recompute-k2-s0"]
    cfg = load_config("guess-tail", list(rec.overrides))
    assert (cfg.trainer.prox, cfg.async_.max_staleness, cfg.async_.max_ahead) == ("recompute", 2, 2)
    assert rec.params == {"mode": "async", "prox": "recompute", "loss": "decoupled", "K": 2, "W": 2}


def test_ks_methods_quick_and_seeds_filter_the_matrix():
    cells = build_cells("agent", ks=[4, 8], quick=True)
    # recompute runs at K = 2 only when asked for, else at the smallest K
    assert [c.name for c in cells] == ["sync-s0", "async-loglinear-k4-s0", "async-loglinear-k8-s0",
                                       "async-recompute-k4-s0"]
    cfg = load_config(cells[0].config, list(cells[0].overrides))
    assert (cfg.trainer.steps, cfg.rollout.prompts_per_step, cfg.eval.every) == (4, 4, 0)
    assert [c.name for c in build_cells("agent", methods=["async-loglinear"], ks=[2])] == \
        [f"async-loglinear-k2-s{s}" for s in range(10)]  # the full suite: 10 seeds
    with pytest.raises(ValueError, match="--ks: the agent suite's async arms need K >= 1, got 0"):
        build_cells("agent", ks=[0, 2])
    with pytest.raises(ValueError, match="--methods: unknown async-k2"):
        build_cells("agent", methods=["async-k2"])


def test_config_replaces_the_preset_and_the_full_defaults_yield_to_it(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text("task:\n  name: guess_tail\nenv:\n  name: guess\n  max_turns: 12\neval:\n  cache_initial: false\n")
    [cell] = build_cells("agent", config=str(own), seeds=1, methods=["sync"])
    cfg = load_config(cell.config, list(cell.overrides))
    assert cell.config == str(own) and cfg.env.max_turns == 12 and not cfg.eval.cache_initial


# ---- the report on synthetic runs -------------------------------------------------------------

SYNC_GEN, SYNC_TRAIN = 3.0, 1.0  # seconds per step: the ideal overlap is 4 / 3
STEPS, BATCH = 4, 16


def _run(method: str, seed: int, *, sps: float, final: float, stale: float, stale_max: float,
         dropped: float, turns: tuple[float, float]) -> dict:
    """One synthetic run: ``sps`` samples/s over STEPS steps of BATCH samples; per step 16 episodes
    (20 on the last step: async arms generate ahead) of ``turns`` (mean, max) turns."""
    wall = STEPS * BATCH / sps
    metrics = [{"step": 0, "eval_reward": 0.2}]
    for step in range(1, STEPS + 1):
        rec = {"step": step, "episode/count": 20 if step == STEPS else 16,
               "episode/turns_mean": turns[0] + (step == STEPS), "episode/turns_max": turns[1],
               "episode/len_p90": 100.0 + step, "episode/end_max_turns": 0.25, "generator_util": 0.5,
               "staleness_seq_mean": stale, "staleness_seq_max": stale_max - (step < STEPS),
               "staleness_token_hist": [30, 10] if stale else [40], "multi_version_seq_frac": 0.5 * stale,
               "step_time_s": wall / STEPS, "lost_units_total": 0}
        if method != "sync":
            rec["dropped_samples_total"] = dropped * step / STEPS
        if step == 1:  # no episode of the step hit max_turns: the run logs no end_max_turns
            del rec["episode/end_max_turns"]
        metrics.append(rec)
    summary = {"steps": STEPS, "train_wall_s": wall, "time_per_step_s": wall / STEPS, "samples_per_s": sps,
               "gen_time_per_step_s": SYNC_GEN if method == "sync" else 2.0,
               "train_time_per_step_s": SYNC_TRAIN if method == "sync" else 1.5,
               "wait_time_per_step_s": SYNC_GEN if method == "sync" else 0.1,
               "initial_eval_reward": 0.2, "final_eval_reward": final,
               "eval_history": [[0, 0.2], [STEPS, final]]}
    return {"cell": f"{method}-s{seed}", "method": method, "seed": seed, "params": {}, "summary": summary,
            "metrics": metrics}


def _results() -> dict:
    runs = []
    for seed in range(3):
        runs.append(_run("sync", seed, sps=4.0 + seed, final=0.50 + 0.01 * seed, stale=0, stale_max=0,
                         dropped=0, turns=(2.0, 8)))
        runs.append(_run("async-loglinear-k2", seed, sps=6.0 + seed, final=0.49 + 0.01 * seed, stale=1.0,
                         stale_max=2.0 + seed, dropped=8.0, turns=(2.0, 9)))
        runs.append(_run("async-recompute-k2", seed, sps=5.0 + seed, final=0.30 + 0.01 * seed, stale=1.0,
                         stale_max=2.0, dropped=0.0, turns=(2.0, 9)))
    return {"suite": "agent", "quick": False, "command": "asyncrl bench agent --ks 2 --seeds 3",
            "created_at": "2026-11-27T00:00:00Z", "host": {"cpus": 2}, "runs": runs}


def test_ideal_overlap_by_hand():
    assert ideal_overlap(3.0, 1.0) == pytest.approx(4 / 3)
    assert ideal_overlap(1.0, 1.0) == pytest.approx(2.0)  # equal phases: perfect overlap halves a step
    assert ideal_overlap(math.nan, 1.0) is None


def test_report_numbers_by_hand(tmp_path):
    summary = write_report(tmp_path, _results())
    assert summary["ideal_overlap"] == pytest.approx(4 / 3)
    assert (summary["sync_gen_time_per_step_s"], summary["sync_train_time_per_step_s"]) == (3.0, 1.0)
    ll = summary["arms"]["async-loglinear-k2"]
    # samples/s: sync 4, 5, 6 → 5; A-3PO 6, 7, 8 → 7
    assert ll["samples_per_s_ratio"] == pytest.approx(7 / 5)
    assert ll["share_of_ideal"] == pytest.approx((7 / 5) / (4 / 3))
    assert ll["time_per_step_ratio"] == pytest.approx((16 * sum(1 / s for s in (6, 7, 8))) /
                                                      (16 * sum(1 / s for s in (4, 5, 6))))
    # episodes/s of a run: (3 · 16 + 20) episodes over its wall of 64 / sps seconds
    sync_eps = [68 / (64 / s) for s in (4, 5, 6)]
    assert summary["methods"]["sync"]["episodes_per_s"]["mean"] == pytest.approx(sum(sync_eps) / 3)
    assert ll["episodes_per_s_ratio"] == pytest.approx(7 / 5)
    assert ll["staleness_oldest_mean"] == pytest.approx(1.0)
    assert ll["staleness_oldest_max"] == 4.0  # the largest over seeds (2, 3, 4)
    assert summary["methods"]["async-loglinear-k2"]["staleness_oldest_max"]["mean"] == pytest.approx(3.0)
    assert ll["dropped_samples"] == 8.0 and summary["methods"]["sync"]["dropped_samples"]["mean"] == 0.0
    # turns: 2 on three steps of 16 episodes, 3 on the last of 20 → (96 + 60) / 68
    assert summary["methods"]["sync"]["turns_mean"]["mean"] == pytest.approx(156 / 68)
    assert summary["methods"]["async-loglinear-k2"]["turns_max"]["mean"] == 9.0
    assert summary["methods"]["sync"]["len_p90"]["mean"] == pytest.approx(102.5)
    # a quarter hit max_turns on steps 2-4 (16, 16 and 20 episodes), none on step 1 (16)
    assert summary["methods"]["sync"]["end_max_turns"]["mean"] == pytest.approx(0.25 * 52 / 68)
    assert summary["token_staleness_share"]["async-loglinear-k2"] == pytest.approx([0.75, 0.25])
    assert summary["token_staleness_share"]["sync"] == pytest.approx([1.0])
    gap = ll["eval_gap_vs_sync"]  # in points: 0.49.. − 0.50.. = −1
    assert gap["mean"] == pytest.approx(-1.0) and gap["margin"] == pytest.approx(3.0)
    assert gap["verdict"] == "equivalent"  # −1 ± 2.3 points: inside ±3 (TOST), not apart (Welch)
    rec = summary["arms"]["async-recompute-k2"]["eval_gap_vs_sync"]
    assert rec["mean"] == pytest.approx(-20.0) and rec["verdict"] == "differs"
    assert rec["p_holm"] >= rec["p"]  # adjusted over the table's two comparisons


def test_report_table_has_every_number_and_the_figures(tmp_path):
    write_report(tmp_path, _results())
    table = (tmp_path / "table.md").read_text()
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| Arm")
            and not line.startswith("| Method") and not line.startswith("| Comparison")]
    assert len(rows) == 3 + 2 + 3 + 2  # speed, ratios, episodes, eval comparisons
    assert all("n/a" not in row for row in rows), [r for r in rows if "n/a" in r]
    assert "| async-loglinear-k2 | 2 | 1.40× | 1.40× | 1.33× | 105% |" in table
    assert "equivalent within 3 points" in table and "differs" in table
    figures = sorted(p.name for p in (tmp_path / "figures").glob("*.png"))
    assert figures == ["fig1_samples_per_s.png", "fig2_token_staleness.png", "fig3_turns.png",
                       "fig4_eval_reward.png"]
    headline = json.loads((tmp_path / "summary.json").read_text())["headline"]
    assert headline[0].startswith("Sync spends 3.00 s generating and 1.00 s training per step")
    assert "1.33×" in headline[0]
    assert any(line.startswith("A-3PO at W = K = 2: 1.40× sync's samples/s (105% of the ideal)") for line in headline)
    assert headline[-1].startswith("Verdict: the fastest async arm, A-3PO at W = K = 2, trains faster than sync")
    assert headline[-1].endswith("equivalent within 3 points.")


def test_token_staleness_shares_sum_histograms_over_steps():
    run = {"metrics": [{"step": 0}, {"step": 1, "staleness_token_hist": [3, 1]},
                       {"step": 2, "staleness_token_hist": [2, 1, 1]}]}
    [shares] = token_staleness_shares([run, {"metrics": [{"step": 1}]}])
    assert shares.tolist() == pytest.approx([5 / 8, 2 / 8, 1 / 8])


def test_one_seed_claims_nothing(tmp_path):
    results = _results()
    results["runs"] = [r for r in results["runs"] if r["seed"] == 0]
    summary = write_report(tmp_path, results)
    assert "one seed: no test" in summary["headline"][-1]
    assert summary["arms"]["async-loglinear-k2"]["samples_per_s_ratio"] == pytest.approx(6 / 4)


# ---- end to end --------------------------------------------------------------------------------

# the tiny model of the other suites' quick runs (two steps of 2 × 4 episodes), with a shorter warm
# start and episodes cut short, so that the warm start (built once: only this test plays guess_tail)
# and the five cells take a minute or two on two cores
AGENT_TINY = [o for o in BENCH_TINY if not o.startswith(("pretrain.steps=", "pretrain.batch_size="))] + [
    "pretrain.steps=20", "pretrain.batch_size=16", "env.episode_tokens=96", "eval.n_problems=4"]


# the whole agent suite at its quick size (minutes): before a release, `make test-all`
@pytest.mark.slow
def test_agent_quick_runs_and_reports(tmp_path, cache):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = run_bench(["agent", "--quick", "--out", "out", *AGENT_TINY, f"policy.cache_dir={cache}"],
                   tmp_path, env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = check_report(tmp_path / "out", 5)
    assert set(summary["arms"]) == set(ARMS[1:])
    assert summary["ideal_overlap"] is not None and summary["ideal_overlap"] > 1
    for arm in summary["arms"].values():
        assert arm["samples_per_s_ratio"] is not None and arm["samples_per_s_ratio"] > 0
    assert any("sync's samples/s" in line and "×" in line for line in summary["headline"])
    assert (tmp_path / "out" / "figures" / "fig2_token_staleness.png").is_file()
