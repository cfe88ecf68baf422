"""The rollout workers' watchdog (``async.worker_timeout_s``) and a shutdown that no stuck worker
holds up: a stopped worker is killed and replaced, and the run goes on; SIGTERM with a stopped
worker exits with its checkpoint instead of waiting on it for good (docs/errors.md, "Faults at
run time": rows ``worker-stopped`` and ``sigterm-with-stopped-worker``)."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from resume_campaign import alive, descendants  # noqa: E402
from test_bad_input import BASE, _expand  # noqa: E402
from test_faults import RUN, _env, assert_nothing_half_written  # noqa: E402
from test_worker_failure import rollout_children  # noqa: E402

from asyncrl.runtime.pool import WorkerPool  # noqa: E402
from asyncrl.runtime.worker import WorkUnit  # noqa: E402


def _start(tmp: Path, model: Path, *args: str) -> subprocess.Popen:
    argv = _expand(["train", *BASE, *RUN, "run.mode=async", *args], tmp, model)
    return subprocess.Popen([sys.executable, "-m", "asyncrl.cli", *argv], cwd=tmp, env=_env(tmp),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _stop_a_worker_after_step(proc: subprocess.Popen, metrics: Path, step: int) -> int:
    """SIGSTOP the run's rollout worker once ``step`` is in metrics.jsonl; returns its pid."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") > step:  # row 0: the evaluation
            workers = rollout_children(proc.pid)
            if workers:
                os.kill(workers[0], signal.SIGSTOP)
                return workers[0]
        time.sleep(0.05)
    raise AssertionError(f"no worker to stop: {proc.communicate()[1][-2000:]}")


@pytest.mark.slow  # a SIGSTOPped worker; a killed one's restart stays in test_worker_failure: make test-all
def test_stopped_worker_is_killed_and_replaced(tmp_path, model_dir):
    # 12 steps: more than the look-ahead can hold once the worker stops after step 1 (max_staleness 4),
    # so the run needs the stopped worker and its watchdog must fire
    proc = _start(tmp_path, model_dir, "trainer.steps=12", "async.worker_timeout_s=4")
    run_dir = tmp_path / "runs" / "fault"
    stopped = _stop_a_worker_after_step(proc, run_dir / "metrics.jsonl", 1)
    stopped_at = time.monotonic()
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err
    # the run's other line: 12 steps of a tiny model may warn that its rewards have no spread
    lines = [line for line in err.strip().splitlines() if "no learning signal" not in line]
    assert len(lines) == 1 and re.fullmatch(
        r"asyncrl: rollout worker 0 killed: no result for [4-9] s \(async.worker_timeout_s=4\); restarting it "
        r"\(restart 1\); \d+ work unit\(s\) lost", lines[0]), err[-3000:]
    # the stall lasted the watchdog's 4 s and a worker's start, not a run's length
    assert time.monotonic() - stopped_at < 120
    assert not alive(stopped)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(13))
    assert rows[-1]["worker_restarts"] == 1
    assert_nothing_half_written(tmp_path / "runs", finished=True)


@pytest.mark.slow
def test_sigterm_with_a_stopped_worker_exits_with_its_checkpoint(tmp_path, model_dir):
    proc = _start(tmp_path, model_dir, "trainer.steps=500", "run.checkpoint_every=0")
    run_dir = tmp_path / "runs" / "fault"
    stopped = _stop_a_worker_after_step(proc, run_dir / "metrics.jsonl", 2)
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGTERM)
    sent = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - sent < 20, "the trainer waited on its stopped worker"
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM after step" in lines[0] and "Traceback" not in err, err[-3000:]
    done = max(json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines())
    assert (run_dir / "checkpoints" / f"step-{done:06d}" / "trainer_state.pt").is_file()
    assert_nothing_half_written(tmp_path / "runs", finished=False)
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(stopped) and not [pid for pid in children if alive(pid)]


# -- the pool's parts, in-process (a forked sleeper stands in for a worker) --

def _sleep_with_default_signals(seconds: float) -> None:
    # a forked child inherits the test process's Python signal handlers (an in-process run earlier in
    # the session may have installed asyncrl's SIGTERM handler); a real worker has the defaults
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    time.sleep(seconds)


def _sleeper(ctx) -> multiprocessing.Process:
    proc = ctx.Process(target=_sleep_with_default_signals, args=(120,), daemon=True)
    proc.start()
    return proc


def _pool(ctx, proc, *, heard_ago: float, ready: bool = True, holds_work: bool = True) -> WorkerPool:
    """A WorkerPool around one process, in the state the watchdog reads."""
    pool = WorkerPool.__new__(WorkerPool)
    now = time.monotonic()
    pool.ctx, pool.stop, pool.result_q = ctx, ctx.Event(), ctx.Queue()
    pool.processes, pool.specs, pool.restarts = {0: proc}, {0: None}, 0
    pool.inflight = {0: {7: WorkUnit(7, [0], [0], 2)} if holds_work else {}}
    pool.heard, pool.started = {0: now - heard_ago}, {0: now - heard_ago}
    pool.ready = {0} if ready else set()
    pool.worker_timeout_s, pool.start_timeout_s = 4.0, 300.0
    pool.causes, pool.received = {}, []
    return pool


def test_watchdog_kills_only_a_silent_worker_holding_work(capsys):
    ctx = multiprocessing.get_context("fork")
    quiet, idle, stuck = _sleeper(ctx), _sleeper(ctx), _sleeper(ctx)
    os.kill(stuck.pid, signal.SIGSTOP)
    try:
        for proc, kwargs in ((quiet, {"heard_ago": 1.0}), (idle, {"heard_ago": 60.0, "holds_work": False}),
                             (stuck, {"heard_ago": 1.0, "ready": False})):  # starting: its own timeout
            _pool(ctx, proc, **kwargs).kill_stuck()
            assert proc.is_alive()
        pool = _pool(ctx, stuck, heard_ago=10.0)
        pool._start = lambda worker_id: None  # the restart itself: not this test's
        lost = pool.restart_dead()
        assert not stuck.is_alive() and stuck.exitcode == -signal.SIGKILL
        assert [u.unit_id for u in lost] == [7] and pool.restarts == 1 and pool.inflight[0] == {}
        assert capsys.readouterr().err == ("asyncrl: rollout worker 0 killed: no result for 10 s "
                                           "(async.worker_timeout_s=4); restarting it (restart 1); "
                                           "1 work unit(s) lost\n")
    finally:
        for proc in (quiet, idle, stuck):
            proc.kill()
            proc.join()


def test_shutdown_ends_a_stopped_worker_within_its_grace():
    ctx = multiprocessing.get_context("fork")
    stopped, running = _sleeper(ctx), _sleeper(ctx)
    os.kill(stopped.pid, signal.SIGSTOP)
    pool = _pool(ctx, stopped, heard_ago=0.0)
    pool.processes[1] = running
    started = time.monotonic()
    pool.shutdown(grace_s=0.5)
    assert time.monotonic() - started < 5
    # neither answered the ask; workers ignore SIGTERM (it is the trainer's), so both are killed
    assert stopped.exitcode == -signal.SIGKILL
    assert running.exitcode == -signal.SIGKILL
