"""`python -m benchmarks control --quick` end to end (a reduced matrix), resumability, and bad input."""

import json
import os
import subprocess
import sys
import time

import pytest

from benchmarks.bench.study import load_study
from benchmarks.bench.suites import build_cells
from benchmarks.bench.cli import main
from cli_forks import checkout_env  # tests/: the checkout on PYTHONPATH

pytest.importorskip("gymnasium")  # the `control` extra

SMALL = ["--seeds", "1", "--methods", "ppo,vaco", "--ks", "2", "--jobs", "2", "total_steps=512", "num_steps=64"]


@pytest.mark.slow  # the apparatus end to end: make test-all
def test_quick_runs_reports_and_resumes(tmp_path, monkeypatch, capsys):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "control", "--quick", "--out", "out",
                           *SMALL], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env=checkout_env({**os.environ, "HF_HUB_OFFLINE": "1"}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    results = load_study(out)
    assert len(results["runs"]) == 2 and results["suite"] == "control"
    assert all(len(run["metrics"]) == 2 for run in results["runs"])
    summary = json.loads((out / "summary.json").read_text())
    for arm in ("ppo", "vaco"):
        point, low, high = summary["aggregate"][arm]["2"]["iqm_final"]
        assert 0.0 <= low <= point <= high <= 1.0
    table = (out / "table.md").read_text()
    assert "| vaco |" in table and "N = 2" in table and "CartPole-v1" in table
    pngs = sorted(p.name for p in (out / "figures").glob("*.png"))
    assert pngs == ["fig1_iqm_final.png", "fig2_iqm_auc.png", "fig3_performance_profile.png",
                    "fig4_iqm_over_training.png"]
    assert "data:image/png;base64," in (out / "report.html").read_text()
    # resume: an interrupted cell (no summary.json) reruns, the finished ones are left alone
    stamps = {p: p.stat().st_mtime for p in (out / "runs").glob("*/summary.json")}
    rerun = out / "runs" / "CartPole-v1-ppo-n2-s0" / "summary.json"
    rerun.unlink()
    time.sleep(0.05)
    monkeypatch.chdir(tmp_path)
    assert main(["control", "--quick", "--out", "out", *SMALL]) == 0
    assert "1 of 2 cells already finished" in capsys.readouterr().err
    assert rerun.exists()
    assert all(p.stat().st_mtime == t for p, t in stamps.items() if p != rerun)


def test_quick_matrix_is_cartpole_every_arm_two_capacities():
    cells = build_cells("control", quick=True)
    assert {c.params["env"] for c in cells} == {"CartPole-v1"}
    assert {c.params["arm"] for c in cells} == {"ppo", "ppo_kl", "spo", "impala", "vaco"}
    assert {c.params["capacity"] for c in cells} == {1, 4} and len(cells) == 20
    full = build_cells("control")
    assert {c.params["capacity"] for c in full} == {1, 4, 8, 16}
    assert {c.params["env"] for c in full} == {"Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5",
                                                "Humanoid-v5"}


@pytest.mark.parametrize("args, field", [
    (["--envs", "Pong-v5"], "--envs"),
    (["--methods", "a2c"], "--methods"),
    (["--ks", "0"], "--ks"),
    (["--ks", "x"], "--ks"),
    (["--jobs", "0"], "--jobs"),
    (["num_envs=two"], "num_envs"),
    (["learning_rate=1"], "learning_rate"),
    (["total_steps=10"], "total_steps"),
    (["clip_coef=1.5"], "eps_low"),  # checked by the arm's loss when the cells are built
])
def test_bad_input_exits_2_with_one_line(capsys, args, field):
    assert main(["control", "--quick", "--list", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and field in err and "Traceback" not in err
