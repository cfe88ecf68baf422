"""`python -m benchmarks <suite> --quick` end to end on the tiny test model (one smoke test per suite), plus
resumability: a second invocation skips finished cells and only rebuilds the report."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cli_forks import checkout_env, run_bench  # tests/: the CLI forked from one imported copy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402

from benchmarks.bench.study import load_study  # noqa: E402

# the suite sets run.mode per method: drop the tiny config's mode; one step of two is enough to
# exercise every metric and figure
BENCH_TINY = [o for o in TINY if not o.startswith(("run.mode=", "eval.every=", "trainer.steps="))] + [
    "trainer.steps=2", "eval.every=0", "async.worker_start_timeout_s=120"]


def bench(tmp_path: Path, cache: str, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return run_bench([*args, *BENCH_TINY, f"policy.cache_dir={cache}"], tmp_path, env, timeout=timeout)


def check_report(out: Path, n_runs: int) -> dict:
    results = load_study(out)  # results.json holds summaries; the metrics come from steps.csv.xz
    assert "metrics" not in json.loads((out / "results.json").read_text())["runs"][0]
    assert len(results["runs"]) == n_runs
    assert all([r["step"] for r in run["metrics"]] == [0, 1, 2] for run in results["runs"])  # 0: eval before
    assert results["command"].startswith("python -m benchmarks ")
    for name in ("summary.json", "table.md", "report.html"):
        assert (out / name).is_file(), name
    pngs = list((out / "figures").glob("*.png"))
    assert pngs and all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "data:image/png;base64," in (out / "report.html").read_text()
    return json.loads((out / "summary.json").read_text())


@pytest.mark.slow  # the apparatus end to end: make test-all
def test_a3po_quick_runs_reports_and_resumes(tmp_path, cache):
    proc = bench(tmp_path, cache, "a3po", "--quick", "--out", "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    summary = check_report(out, 3)
    for key in ("speedup_vs_sync", "speedup_vs_recompute", "prox_time_ratio", "ideal_overlap"):
        assert summary[key] is not None and summary[key] > 0, key
    assert summary["prox_time_ratio"] > 1  # a forward pass costs more than one fused op
    assert set(summary["per_method"]) == {"sync", "async-recompute", "async-loglinear"}
    # resume: nothing reruns (the finished summaries are untouched), the report is rebuilt
    stamps = {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")}
    time.sleep(0.05)
    again = bench(tmp_path, cache, "a3po", "--quick", "--out", "out", timeout=120)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 of 3 cells already finished" in again.stderr
    assert {p: p.stat().st_mtime for p in stamps} == stamps


@pytest.mark.slow  # four tiny cells end to end: make test-all
def test_a3po_repeats_run_interleaved_pair_up_and_resume(tmp_path, cache):
    """`--repeats 2`: A B B A, one run folder per repeat, the speed table over the two pairs marked as
    below the protocol, and a rerun after the cut-off of the last repeat runs only that one."""
    args = ("a3po", "--quick", "--methods", "sync,async-loglinear", "--repeats", "2", "--out", "out")
    proc = bench(tmp_path, cache, *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    runs = load_study(out)["runs"]
    assert [(r["method"], r["repeat"]) for r in runs] == [("sync", 1), ("async-loglinear", 1),
                                                          ("async-loglinear", 2), ("sync", 2)]
    assert all(r["load"]["start"] is not None for r in runs)
    summary = json.loads((out / "summary.json").read_text())
    wall = summary["speed"]["comparisons"]["async-loglinear vs sync"]["train_wall_s"]
    assert wall["n"] == 2 and wall["below_protocol"] and wall["ci_low"] <= wall["geomean"] <= wall["ci_high"]
    assert summary["methods"]["sync"]["final_eval_reward"]["n"] == 1  # repeat 1 only
    assert "(2 repeats: below the 5-repeat protocol)" in (out / "table.md").read_text()
    shutil.rmtree(out / "runs" / "sync-s0-r2")  # cut off during the last repeat
    again = bench(tmp_path, cache, *args, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "3 of 4 cells already finished" in again.stderr


# the atlas suite's quick subset (minutes): `make test-all`
@pytest.mark.slow
def test_atlas_quick_subset(tmp_path, cache):
    """Two cells at a time (subprocesses; the first to need the warm start builds it, the other waits)."""
    proc = bench(tmp_path, cache, "atlas", "--quick", "--methods", "decoupled,m2po", "--ks", "0,2",
                 "--out", "out", "--jobs", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = check_report(tmp_path / "out", 4)
    lag = summary["rows"]["lag"]
    assert lag["cols"] == [0, 2] and set(lag["grid"]) == {"decoupled", "m2po"} and set(summary["rows"]) == {"lag"}
    assert summary["holds_to_k"] == {"decoupled": None, "m2po": None}  # no ppo at K = 0: no sync to be near
    # --report-only over a larger matrix: runs nothing, reports the 4 finished cells of 6, says so
    wider = ("atlas", "--quick", "--methods", "decoupled,m2po,ppo", "--ks", "0,2", "--out", "out")
    proc = bench(tmp_path, cache, *wider, "--report-only", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "out" / "runs").iterdir()) == \
        ["decoupled-k0-s0", "decoupled-k2-s0", "m2po-k0-s0", "m2po-k2-s0"]
    partial = check_report(tmp_path / "out", 4)
    assert partial["cells_total"] == 6 and partial["headline"][0].startswith("Partial: 4 of 6 cells")
    assert "--report-only" not in json.loads((tmp_path / "out" / "results.json").read_text())["command"]
    proc = bench(tmp_path, cache, *wider[:-1], "elsewhere", "--report-only", timeout=120)
    assert proc.returncode == 1 and "nothing to report" in proc.stderr
    # the study alone (no run directories, as committed) re-renders the same report
    before = json.loads((tmp_path / "out" / "summary.json").read_text())
    shutil.move(tmp_path / "out" / "runs", tmp_path / "elsewhere-runs")
    (tmp_path / "out" / "summary.json").unlink()
    proc = bench(tmp_path, cache, *wider, "--report-only", timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert after == before


def test_bad_cell_config_is_refused_before_anything_runs(tmp_path, cache):
    proc = bench(tmp_path, cache, "atlas", "--quick", "--methods", "ppo", "--ks", "0", "--out", "out",
                 "policy.model_path=/nonexistent/model", timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "policy.model_path" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_failed_cell_is_one_line_and_nonzero(tmp_path, cache):
    (tmp_path / "empty").mkdir()  # passes validation (config.json, tokenizer.json), fails when the run loads it
    (tmp_path / "empty" / "config.json").write_text("{}")
    (tmp_path / "empty" / "tokenizer.json").write_text("{}")  # present (validation) but unreadable
    proc = bench(tmp_path, cache, "atlas", "--quick", "--methods", "ppo", "--ks", "0", "--out", "out",
                 f"policy.model_path={tmp_path / 'empty'}", timeout=120)
    assert proc.returncode == 1
    assert "cell ppo-k0-s0 failed" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "runs" / "ppo-k0-s0" / "summary.json").exists()


def test_bad_bench_arguments_exit_2_without_traceback(tmp_path, cache):
    proc = bench(tmp_path, cache, "a3po", "--methods", "nope", "--out", "out", timeout=60)
    assert proc.returncode == 2 and "unknown nope" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


# slow: the runner, its report and resume are checked by test_a3po_quick_runs_reports_and_resumes,
# the TRL peer itself by tests/bench/test_peer_trl.py::test_peer_trl_end_to_end
@pytest.mark.slow
def test_peer_trl_quick(tmp_path, cache):
    pytest.importorskip("trl")
    proc = bench(tmp_path, cache, "peer-trl", "--quick", "--out", "out")
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = check_report(tmp_path / "out", 3)
    assert summary["samples_per_s_ratio_vs_trl"] > 0


def test_list_into_a_pipe_closed_early_ends_quietly():
    """``python -m benchmarks atlas --list | head -1``: the reader leaves early; no traceback, exit 0."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "benchmarks", "atlas", "--list"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=checkout_env())
    assert proc.stdout.readline().startswith("ppo-k0-s0 ")  # more lines than a pipe buffer holds follow
    proc.stdout.close()
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and "Traceback" not in err, err[-2000:]
