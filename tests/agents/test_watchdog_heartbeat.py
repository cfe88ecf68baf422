"""The async watchdog knows about environments: a rollout worker waiting on slow environment calls
heartbeats (every second, from the scheduler's wait), so a healthy worker whose turn spends longer
than ``async.worker_timeout_s`` in its environments is not killed. Here one group of 8 calls of 0.5 s runs one at
a time (``env.concurrency=1``): about 4 s of waiting with no result to send, against a 2 s watchdog; before the
heartbeat, the worker was killed every step."""

import subprocess
import sys

import pytest

from .test_agents_e2e import ENV, SMALL, rows

PLUGIN = '''
import time
from asyncrl.agents import ENVIRONMENTS

ENVIRONMENTS["slowpoke"] = "slow_env:Slow"


class Slow:
    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        time.sleep(0.5)
        return "", 0.0, True, {}
'''


@pytest.mark.slow  # a watchdog fault path: make test-all
def test_a_worker_waiting_on_slow_environments_is_not_killed(tmp_path, cache):
    (tmp_path / "slow_env.py").write_text(PLUGIN)
    args = [*[a for a in SMALL if not a.startswith("rollout.")], "task=arithmetic", "run.plugins=[slow_env]",
            "env.name=slowpoke", "env.max_turns=1", "env.episode_tokens=60", "rollout.max_new_tokens=8",
            "rollout.prompts_per_step=1", "rollout.samples_per_prompt=8", "env.concurrency=1", "eval.n_problems=0",
            "run.mode=async", "async.worker_timeout_s=2", "trainer.steps=2", "run.name=slow",
            f"policy.cache_dir={cache}"]
    done = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *args], cwd=tmp_path,
                          env={**ENV, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "killed: no result" not in done.stderr
    records = [r for r in rows(tmp_path / "runs" / "slow" / "metrics.jsonl") if r["step"] > 0]
    assert [r["step"] for r in records] == [1, 2]
    assert records[-1]["worker_restarts"] == 0 and records[-1]["lost_units_total"] == 0
    assert max(r["episode/env_wait_s"] for r in records) > 2  # the waiting outlasted the watchdog
