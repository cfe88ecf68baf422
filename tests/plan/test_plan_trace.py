"""``asyncrl plan``'s per-GPU table against fake-tensor traces (benchmarks/plan_trace.py): the
committed traces of the 1.5B/1-GPU, 7B/8-GPU and 32B/32-GPU jobs against the plan the code makes
now, and a tiny job traced now; every line within 10 %."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncrl.plan.estimate import Rates
from asyncrl.plan.gpus import job_gpus

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "benchmarks" / "plan_trace.py"
COMMITTED = ROOT / "benchmarks" / "results" / "2026-11-27-plan" / "plan_trace.json"
TOLERANCE = 0.10


def _plan_trace():
    spec = importlib.util.spec_from_file_location("plan_trace", TRACE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_within(job: dict, name: str) -> None:
    """Every GPU role's total, and the trainer's step and load peaks, trace within 10 % of the plan."""
    for role, line in job["roles"].items():
        assert line["trace_total"] == pytest.approx(line["plan_total"], rel=TOLERANCE), (name, role)
        for item, planned in line["plan"].items():
            assert line["trace"][item] == pytest.approx(planned, rel=TOLERANCE), (name, role, item)
        trainer = line["trainer"]
        if trainer:
            assert trainer["trace_step"] == pytest.approx(trainer["plan_step"], rel=TOLERANCE), (name, role)
            assert trainer["trace_load"] == pytest.approx(trainer["plan_load"], rel=TOLERANCE), (name, role)


def test_committed_traces_match_the_plan_made_now():
    """The committed JSON's plan numbers are the code's (so the trace checks this plan), and each
    line is within 10 % of its trace; the 7B job fits every GPU, the 32B one does not."""
    committed, trace = json.loads(COMMITTED.read_text()), _plan_trace()
    assert set(committed) == {"1.5B-1", "7B-8", "32B-32"}
    for name, job in committed.items():
        roles = job_gpus(trace.job_inputs(name)[0], Rates())
        assert {role.role: role.total for role in roles} == {r: line["plan_total"] for r, line in job["roles"].items()}
        check_within(job, name)
    assert all(line["fits"] for line in committed["7B-8"]["roles"].values())
    assert not committed["32B-32"]["roles"]["rollout GPU (vllm)"]["fits"]


@pytest.mark.slow  # a traced job, a measurement check: make test-all
def test_tiny_job_traced_now_matches_the_plan(tmp_path):
    """A tiny Qwen2 shape on 2 fake ranks and a rollout GPU, traced in fresh processes (~20 s)."""
    out = tmp_path / "tiny.json"
    done = subprocess.run([sys.executable, str(TRACE), "--job", "tiny-2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    job = json.loads(out.read_text())["tiny-2"]
    assert set(job["roles"]) == {"trainer rank 0", "trainer rank 1", "rollout GPU (vllm)"}
    check_within(job, "tiny-2")


@pytest.mark.slow
def test_1_5b_trace_reproduces_the_committed_one():
    """The 1.5B job traced again (about 2 minutes on 2 cores) gives the committed bytes."""
    job = _plan_trace().trace_job("1.5B-1")
    committed = json.loads(COMMITTED.read_text())["1.5B-1"]
    for role, line in job["roles"].items():
        assert line["trace"] == committed["roles"][role]["trace"], role
