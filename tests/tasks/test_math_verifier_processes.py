"""The math-verify pool's processes: a check stuck where no signal reaches it ends by the hard
timeout (the pool killed and started again); workers end with their interpreter, also from a
daemonic rollout worker; ``close`` stops them and a closed verifier refuses work."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from asyncrl.tasks.math_reward import MathVerifier


def _stalling_check(pred: str, gold: str) -> bool:
    """A check stuck where no signal reaches it: only the hard timeout (pool kill) can end it."""
    if pred == "stall":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(60)
    return float(pred) == float(gold)


def test_hard_timeout_kills_and_recycles_the_pool() -> None:
    with MathVerifier(timeout_s=1.0, workers=1, check_fn=_stalling_check) as v:
        started = time.monotonic()
        scores = v.score_many(["#### 1", "#### stall", "#### 2", "#### 3"], ["1.0", "1", "2.0", "4"])
        assert time.monotonic() - started < 1.0 + 8.0  # two worker start-ups + one hard timeout
        assert scores == [1.0, 0.0, 1.0, 0.0]  # items after the stall ran in the new pool
        assert v.stats["hard_timeouts"] == 1 and v.stats["pool_restarts"] == 1
        assert v.score_many(["#### 5"], ["5.0"]) == [1.0]
        assert v.stats["checks"] == 4


_CHILD = textwrap.dedent(
    """
    import multiprocessing as mp, os, sys
    from asyncrl.tasks.math_reward import MathVerifier

    def rollout_worker(q):  # a daemonic process, like asyncrl's rollout workers
        v = MathVerifier(timeout_s=5.0, workers=1)
        q.put((v.score_many(["\\\\boxed{0.5}", "#### 2"], ["\\\\frac{1}{2}", "3"]),
               [p.pid for p in mp.active_children()]))

    if __name__ == "__main__":
        v = MathVerifier(timeout_s=5.0, workers=2)  # never closed: atexit must do it
        print("main", v.score_many(["#### 1/2"], ["0.5"]), [p.pid for p in mp.active_children()], flush=True)
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        proc = ctx.Process(target=rollout_worker, args=(q,), daemon=True)
        proc.start()
        print("daemon", *q.get(timeout=60), flush=True)
        proc.join(30)
        print("exitcode", proc.exitcode, flush=True)
    """
)


def test_daemon_processes_and_interpreter_exit(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=90, env=env)
    assert out.returncode == 0, out.stderr
    lines = {line.split(" ", 1)[0]: line for line in out.stdout.splitlines()}
    assert lines["main"].startswith("main [1.0]"), out.stdout
    assert lines["daemon"].startswith("daemon [1.0, 0.0]"), out.stdout + out.stderr
    assert lines["exitcode"] == "exitcode 0", out.stdout + out.stderr
    pids = [int(x) for line in (lines["main"], lines["daemon"]) for x in
            line.split("[")[-1].rstrip("]").replace(",", " ").split()]
    deadline = time.monotonic() + 5
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [pid for pid in alive if _alive(pid)]
        time.sleep(0.1)
    assert not alive, f"verifier workers survived their parent: {alive}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of an exited process is not alive
        return Path(f"/proc/{pid}/status").read_text().find("State:\tZ") < 0
    except OSError:
        return False


def test_close_stops_workers() -> None:
    before = {p.pid for p in mp.active_children()}
    with MathVerifier(timeout_s=2.0, workers=2) as v:
        v.warmup()
        ours = {p.pid for p in mp.active_children()} - before
        assert len(ours) == 2
    # the processes themselves, not multiprocessing's bookkeeping: a worker reaped by the executor's
    # manager thread can stay listed in active_children() with exitcode None (a waitpid race)
    assert not any(_alive(pid) for pid in ours)
    with pytest.raises(RuntimeError, match="closed"):
        v.score("#### 1", "2")
    with pytest.raises(ValueError, match="^timeout_s: "):
        MathVerifier(timeout_s=0)
    with pytest.raises(ValueError, match="^workers: "):
        MathVerifier(workers=0)
    with pytest.raises(ValueError, match="^check_fn: "):
        MathVerifier(check_fn=lambda pred, gold: True)
