"""Resume: a run killed with SIGKILL at a random step and resumed ends bitwise equal to the run
that was never interrupted (sync and simulated), with the same metrics and ledger rows; SIGTERM
checkpoints and exits cleanly; a killed trainer leaves no worker behind; resuming refuses changes
that would alter the run."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from resume_campaign import alive, descendants  # noqa: E402  (the kill campaign's process checks)
from test_e2e_train import TINY  # noqa: E402

from cli_forks import run_cli, CliForks  # noqa: E402  (tests/, on the path beside conftest.py)

BASE = [*TINY, "trainer.lr=0.0002", "eval.every=3", "run.checkpoint_every=1"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
TIMING = ("_s", "per_s", "util", "_mb")  # wall-clock figures and memory differ between any two runs


def cli(tmp_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return run_cli(list(args), tmp_path, ENV, timeout=timeout)


def start(tmp_path: Path, cache: str, name: str, *args: str) -> subprocess.Popen:
    """The run in a process group of its own (its workers join it), as a shell or Slurm starts it."""
    return subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *BASE, f"run.name={name}",
                             f"policy.cache_dir={cache}", *args], cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def rows(path: Path) -> list[dict]:
    """The complete lines of a JSONL file (a run still writing it may have half a line at its end)."""
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def steps_done(metrics: Path) -> int:
    """Training steps in metrics.jsonl (its step-0 row is the evaluation before training)."""
    return sum(r["step"] > 0 for r in rows(metrics))


def comparable(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not any(k.endswith(t) or t in k for t in TIMING)} for r in records]


def wait_for_step(proc: subprocess.Popen, metrics: Path, step: int, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while steps_done(metrics) < step:
        assert proc.poll() is None, f"run ended early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "run too slow"
        time.sleep(0.05)


# plain sync is slow: sync-schedule-kl resumes the same mode with more state (an lr schedule, a KL
# reference) in the default suite
@pytest.mark.parametrize("mode", [pytest.param(["run.mode=sync"], marks=pytest.mark.slow), ["run.mode=simulated", "async.lag=2", "trainer.prox=loglinear",
                                                      "loss.name=decoupled"],
                                  # an lr schedule and a KL reference: their state resumes too
                                  ["run.mode=sync", "trainer.lr_schedule=cosine", "trainer.warmup_steps=2",
                                   "trainer.min_lr_ratio=0.1", "trainer.kl_coef=0.5"]],
                         ids=["sync", "simulated", "sync-schedule-kl"])
def test_sigkill_and_resume_is_bitwise(tmp_path, cache, mode):
    steps = ["trainer.steps=6"]
    whole = cli(tmp_path, "train", *BASE, "run.name=whole", f"policy.cache_dir={cache}", *mode, *steps)
    assert whole.returncode == 0, whole.stderr[-3000:]
    kill_after = random.Random(" ".join(mode)).randint(2, 5)  # the step after which the kill lands
    proc = start(tmp_path, cache, "killed", *mode, *steps)
    run_dir = tmp_path / "runs" / "killed"
    wait_for_step(proc, run_dir / "metrics.jsonl", kill_after)
    proc.kill()
    proc.communicate()
    assert not (run_dir / "summary.json").exists()
    resumed = cli(tmp_path, "train", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a = load_file(tmp_path / "runs" / "whole" / "checkpoint" / "model.safetensors")
    b = load_file(run_dir / "checkpoint" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    whole_rows = rows(tmp_path / "runs" / "whole" / "metrics.jsonl")
    assert any(r.get("frac_zero_adv_groups", 1) < 1 for r in whole_rows), "no reward signal: test is vacuous"
    assert comparable(rows(run_dir / "metrics.jsonl")) == comparable(whole_rows)
    assert rows(run_dir / "ledger.jsonl") == rows(tmp_path / "runs" / "whole" / "ledger.jsonl")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval_history"] == json.loads((tmp_path / "runs" / "whole" / "summary.json").read_text())[
        "eval_history"]


def test_sigterm_checkpoints_and_leaves_no_process(tmp_path, cache):
    proc = start(tmp_path, cache, "term", "run.mode=async", "trainer.steps=200", "run.checkpoint_every=0")
    run_dir = tmp_path / "runs" / "term"
    wait_for_step(proc, run_dir / "metrics.jsonl", 2)
    children = descendants(proc.pid)
    assert children, "the async run has no worker processes"
    # to the whole group, as Slurm or torchrun send it: still one checkpoint and one line
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "SIGTERM" in lines[0] and "--resume" in lines[0], err[-2000:]
    assert "Traceback" not in err
    done = steps_done(run_dir / "metrics.jsonl")
    assert (run_dir / "checkpoints" / f"step-{done:06d}" / "trainer_state.pt").is_file()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in children)
    # the run continues from there: no group trained on twice, the bound holds
    resumed = cli(tmp_path, "train", "--resume", str(run_dir), f"trainer.steps={done + 3}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ledger = rows(run_dir / "ledger.jsonl")
    assert [r["step"] for r in ledger] == list(range(1, done + 4))
    groups = [g for r in ledger for g in r["consumed"] + r["dropped"]]
    assert len(groups) == len(set(groups))
    assert all(r["staleness_token_max"] <= 4 for r in rows(run_dir / "metrics.jsonl") if r["step"] > 0)


def test_sigkill_of_trainer_leaves_no_process(tmp_path, cache):
    proc = start(tmp_path, cache, "orphans", "run.mode=async", "trainer.steps=200")
    wait_for_step(proc, tmp_path / "runs" / "orphans" / "metrics.jsonl", 1)
    children = descendants(proc.pid)
    assert children, "the async run has no worker processes"
    proc.kill()
    proc.communicate()
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in children if alive(pid)], "processes outlived the trainer by 10 s"


def test_resume_refusals(tmp_path, cache):
    ok = cli(tmp_path, "train", *BASE, "run.name=r", f"policy.cache_dir={cache}", "run.mode=sync", "trainer.steps=2")
    assert ok.returncode == 0, ok.stderr[-3000:]
    run_dir = tmp_path / "runs" / "r"
    cases = [
        (["train", "--resume", str(run_dir), "trainer.lr=0.1"], "trainer.lr"),  # changes the experiment
        (["train", "--resume", str(run_dir)], "trainer.steps"),  # already finished: nothing to do
        (["train", "--resume", str(tmp_path / "nowhere")], "--resume"),
        (["train", *BASE, "run.name=r", f"policy.cache_dir={cache}", "run.mode=sync"], "run.name"),  # exists
        (["train", *BASE, "run.name=r", f"policy.cache_dir={cache}", "run.mode=async", "run.resume=auto",
          "trainer.steps=4"], "run.mode"),  # auto-resume with another mode
    ]
    forks = CliForks(ENV)  # each refusal in a process of its own, without paying the imports each time
    try:
        for args, key in cases:
            proc = forks.run(args, tmp_path)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and key in lines[0], (args, proc.stderr[-2000:])
    finally:
        forks.close()
    more = cli(tmp_path, "train", "--resume", str(run_dir), "trainer.steps=3")  # a longer run: continues
    assert more.returncode == 0, more.stderr[-3000:]
    assert [r["step"] for r in rows(run_dir / "metrics.jsonl")] == [0, 1, 2, 3]
