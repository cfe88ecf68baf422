"""How an agent run ends. One ended by its environment keeps its last finished step: the failure
policy's stop checkpoints that step first, the one-line error says so, and ``--resume`` continues
from it to the end (5 finished steps used to be lost, and resume refused). One whose environment
left a non-daemon thread running exits when training ends, with a warning naming the thread."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from .test_agents_e2e import ENV, SMALL, rows

PLUGIN = '''
import os, threading
from asyncrl.agents import ENVIRONMENTS

ENVIRONMENTS["breaks"] = "breaking_env:Breaks"
ENVIRONMENTS["lingers"] = "breaking_env:Lingers"
_lock, _calls = threading.Lock(), [0]


class Breaks:
    """Every step call past this process's $BREAK_AFTER-th raises, and every one once the file
    $BREAK_FILE exists."""

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        with _lock:
            _calls[0] += 1
            broken = _calls[0] > int(os.environ["BREAK_AFTER"]) or os.path.exists(os.environ["BREAK_FILE"])
        if broken:
            raise ConnectionError("the sandbox service went away")
        return "again", 0.0, False, {}


class Lingers(Breaks):
    """Starts a thread that never ends when it is built (a client's keep-alive), daemon=False."""

    def __init__(self):
        if not any(t.name == "env-keepalive" for t in threading.enumerate()):
            threading.Thread(target=threading.Event().wait, name="env-keepalive", daemon=False).start()
'''
ARGS = [*[a for a in SMALL if not a.startswith("rollout.")], "task=arithmetic", "run.plugins=[breaking_env]",
        "env.name=breaks", "env.max_turns=2", "env.episode_tokens=120", "rollout.max_new_tokens=8",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "env.retries=0", "env.max_failure_frac=0",
        "trainer.steps=3", "run.name=breaks", "eval.n_problems=0"]


def _train(tmp_path: Path, break_after: int, *args: str, break_at_step: int = 0) -> subprocess.CompletedProcess:
    """The run; with ``break_at_step``, the environment breaks once metrics.jsonl has that step
    (an async worker plays ahead of the trainer by a number of calls no count can fix)."""
    (tmp_path / "breaking_env.py").write_text(PLUGIN)
    flag = tmp_path / "BREAK"
    env = {**ENV, "PYTHONPATH": str(tmp_path), "BREAK_AFTER": str(break_after), "BREAK_FILE": str(flag)}
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics, deadline = tmp_path / "runs" / "breaks" / "metrics.jsonl", time.monotonic() + 600
    while break_at_step and proc.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and any(r["step"] >= break_at_step for r in rows(metrics)):
            flag.touch()
            break
        time.sleep(0.05)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        proc.kill()  # no-op once it exited; a hung run does not outlive the test
        flag.unlink(missing_ok=True)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_a_run_ended_by_its_environment_resumes_from_its_last_finished_step(tmp_path, cache, mode):
    # sync: 4 episodes of 2 turns a step, so step 1 makes 8 step calls at most and the 9th fails in step 2
    sync = mode == "sync"
    first = _train(tmp_path, 8 if sync else 10**6, *ARGS, f"run.mode={mode}", f"policy.cache_dir={cache}",
                   break_at_step=0 if sync else 1)
    assert first.returncode == 2, first.stderr[-3000:]
    last = [line for line in first.stderr.splitlines() if line.strip()][-1]
    assert "Traceback" not in first.stderr
    assert "ConnectionError: the sandbox service went away" in last
    run = tmp_path / "runs" / "breaks"
    steps = [r["step"] for r in rows(run / "metrics.jsonl") if r["step"] > 0]
    assert steps == list(range(1, len(steps) + 1)) and (steps == [1] if sync else 1 <= len(steps) < 3)
    assert last.endswith(f"(stopped after step {steps[-1]}, checkpointed in runs/breaks/checkpoints/"
                         f"step-{steps[-1]:06d}: --resume continues from it)")

    second = _train(tmp_path, 10**6, "--resume", str(run))
    assert second.returncode == 0, second.stderr[-3000:]
    assert [r["step"] for r in rows(run / "metrics.jsonl") if r["step"] > 0] == [1, 2, 3]


def test_a_thread_the_environment_forgot_does_not_keep_the_run_alive(tmp_path, cache):
    args = [a if a != "env.name=breaks" else "env.name=lingers" for a in ARGS]
    done = _train(tmp_path, 10**6, *args, "run.mode=sync", "trainer.steps=1", f"policy.cache_dir={cache}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert ("asyncrl: warning: 1 non-daemon thread started by the run's code still running (env-keepalive); "
            "exiting without them") in done.stderr
    assert (tmp_path / "runs" / "breaks" / "summary.json").exists()
