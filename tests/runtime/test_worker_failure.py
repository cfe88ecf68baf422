"""A rollout worker killed mid-run is detected and replaced; training finishes within the bound."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from test_modes_e2e import BASE  # noqa: E402


def rollout_children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    children = []
    for child in map(int, out):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            children.append(child)
    return children


def test_killed_worker_is_restarted(tmp_path, cache):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", *BASE, "run.name=kill", f"policy.cache_dir={cache}",
           "run.mode=async", "async.max_staleness=1", "trainer.steps=25", "trainer.prox=loglinear",
           "loss.name=decoupled"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "runs" / "kill" / "metrics.jsonl"
    deadline = time.monotonic() + 240
    killed = None
    while killed is None and time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and metrics.read_text().count("\n") >= 2:  # step 0 (the eval) and step 1
            children = rollout_children(proc.pid)
            if children:
                killed = children[0]
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=300)
    assert killed is not None, "never found a rollout worker to kill"
    assert proc.returncode == 0, stderr[-3000:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()][1:]  # after step 0's eval row
    assert len(records) == 25
    assert records[-1]["worker_restarts"] >= 1
    assert all(r["staleness_seq_max"] <= 1 for r in records)
