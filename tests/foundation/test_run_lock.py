"""One writer per run directory (asyncrl.runtime.run_lock): a second writer is refused in one line
naming the holder's pid, and a holder's death (SIGKILL) frees the run for ``--resume``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from asyncrl.training.checkpoint import step_dirs
from asyncrl.config import ConfigError
from asyncrl.runtime.run_lock import LOCK_NAME, RunLock

SMALL = ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
         "trainer.n_minibatches=1", "eval.n_problems=2", "eval.every=0", "run.mode=sync",
         "run.tensorboard=false", "run.report=false"]
HOLDER = ("import sys, time\nfrom asyncrl.runtime.run_lock import RunLock\n"
          "lock = RunLock(sys.argv[1]); lock.acquire(); print('locked', flush=True); time.sleep(600)\n")


def _env(tmp: Path) -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
            "ASYNCRL_CACHE": str(tmp / "cache")}


def _holder(run_dir: Path) -> subprocess.Popen:
    """A process that holds ``run_dir``'s lock until killed."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(run_dir)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def _train(tmp: Path, *args: str) -> subprocess.Popen:
    """``asyncrl train`` in the background; stderr into a file (a long run's step lines would fill a pipe)."""
    err = open(tmp / f"stderr-{time.monotonic_ns()}.txt", "w+")  # noqa: SIM115 (read back by _err)
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *args], cwd=tmp, env=_env(tmp),
                            stdout=subprocess.DEVNULL, stderr=err, text=True)
    proc.err_file = err
    return proc


def _err(proc: subprocess.Popen) -> str:
    proc.err_file.seek(0)
    return proc.err_file.read()


def test_a_held_lock_refuses_a_second_writer_naming_the_pid(tmp_path):
    holder = _holder(tmp_path / "run")
    try:
        assert (tmp_path / "run" / LOCK_NAME).read_text().strip() == str(holder.pid)
        for take in (RunLock.try_existing, RunLock.acquire):
            with pytest.raises(ConfigError, match=rf"run.name: .*run is in use by another run \(pid {holder.pid}\)"):
                take(RunLock(tmp_path / "run"))
        assert (tmp_path / "run" / LOCK_NAME).read_text().strip() == str(holder.pid)  # the loser wrote nothing
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_holder_never_blocks_the_next_writer(tmp_path):
    holder = _holder(tmp_path / "run")
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    lock = RunLock(tmp_path / "run")
    lock.try_existing()  # the stale pid in the file does not matter: the kernel released the lock
    assert lock.held
    lock.acquire()
    assert (tmp_path / "run" / LOCK_NAME).read_text().strip() == str(os.getpid())
    lock.release()
    again = RunLock(tmp_path / "run")
    again.acquire()  # released: this process takes it once more
    assert again.held
    again.release()


def test_no_lock_file_means_nothing_is_created_before_the_run(tmp_path):
    lock = RunLock(tmp_path / "run")
    lock.try_existing()
    assert not lock.held and not (tmp_path / "run").exists()


def test_two_trains_started_together_exactly_one_runs(tmp_path, model_dir):
    """Different seeds, one run name: the winner's seed is the one in every file of the run."""
    procs = {seed: _train(tmp_path, *SMALL, f"policy.model_path={model_dir}", "trainer.steps=2", "run.name=x",
                          f"run.seed={seed}") for seed in (1, 2)}
    results = {seed: (p.wait(timeout=300), "", _err(p)) for seed, p in procs.items()}
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 2], {s: (c, e[-1500:]) for s, (c, _, e) in results.items()}
    winner = next(seed for seed, (code, _, _) in results.items() if code == 0)
    _, _, loser_err = next(r for r in results.values() if r[0] == 2)
    lines = loser_err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in loser_err, loser_err[-1500:]
    # Which refusal the loser meets depends on timing: the winner's lock while it runs, or (if the
    # loser reached its checks only after the winner had finished) the finished run's directory.
    assert "run.name: " in lines[0], lines[0]
    assert "another run" in lines[0] or "already exists" in lines[0], lines[0]
    run = tmp_path / "runs" / "x"
    assert json.loads((run / "summary.json").read_text())["seed"] == winner
    assert f"seed: {winner}" in (run / "config.yaml").read_text()
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]


def _wait_for(path_check, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path_check():
        assert proc.poll() is None, _err(proc)[-2000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def test_a_running_train_refuses_a_second_and_a_killed_one_resumes(tmp_path, model_dir):
    run = tmp_path / "runs" / "x"
    first = _train(tmp_path, *SMALL, f"policy.model_path={model_dir}", "trainer.steps=5000", "run.name=x",
                   "run.checkpoint_every=1")
    try:
        _wait_for(lambda: bool(step_dirs(run)), first)
        second = _train(tmp_path, *SMALL, f"policy.model_path={model_dir}", "trainer.steps=5000", "run.name=x",
                        "run.resume=auto")
        code, err = second.wait(timeout=120), _err(second)
        assert code == 2 and err.strip() == f"asyncrl: config error: run.name: runs/x is in use by another " \
                                             f"run (pid {first.pid})", err[-1500:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert (run / LOCK_NAME).read_text().strip() == str(first.pid)  # stale: the kernel released it
    last = step_dirs(run)[-1][0]
    resumed = _train(tmp_path, "--resume", str(run), f"trainer.steps={last + 2}", "run.progress=false")
    code, err = resumed.wait(timeout=300), _err(resumed)
    assert code == 0, err[-2000:]
    assert f"resuming from step {last} of {last + 2}" in err
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(last + 3))
