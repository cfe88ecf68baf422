"""Rollout workers on another node of a Ray cluster: a two-node cluster on 127.0.0.1 (the head with
no CPU for actors, a second node with two), joined through ``RAY_ADDRESS`` by ``asyncrl train
async.backend=ray``, with weights through Ray's object store or the ``collective`` channel. The run places both workers on the second node and says so, trains every
prompt group once (ledger), every Ray process and the trainer listen on loopback only, and nothing
of the cluster outlives its shutdown."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
sys.path.insert(0, str(Path(__file__).parent))
from test_ray_loopback import _left_after, _loopback, note  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process and socket tables")]
HERE = Path(__file__).parent
ARGS = ["run.progress=false", "run.tensorboard=false", "run.mode=async", "async.backend=ray", "async.n_workers=2",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
        "trainer.n_minibatches=1", "trainer.steps=4", "eval.n_problems=2", "eval.samples=1", "eval.every=0",
        "task.arithmetic.n_train=40", "task.arithmetic.n_eval=4"]


def _family(*roots: psutil.Process) -> list[psutil.Process]:
    members = []
    for root in roots:
        try:
            members += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return members


def _sample(roots, seen: dict, listening: set, stop: threading.Event) -> None:
    """Until ``stop``: every process of the roots' trees (pid -> (start time, command)) and their
    listening sockets (pid, address, port)."""
    while not stop.is_set():
        note(_family(*roots), seen, listening)
        stop.wait(0.2)


@contextlib.contextmanager
def _two_node_run(tmp_path: Path, model_dir: Path, name: str, *args: str):
    """The two-node cluster and a trainer joined to it; yields (trainer, node id, seen, listening,
    the cluster's pid), sampled until the trainer ends; the cluster is shut down on the way out."""
    cluster = subprocess.Popen([sys.executable, str(HERE / "ray_cluster.py")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    seen, listening, stop = {}, set(), threading.Event()
    try:
        address, node_id = cluster.stdout.readline().split()
        env = {**os.environ, "RAY_ADDRESS": address, "HF_HUB_OFFLINE": "1"}
        trainer = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *ARGS, f"policy.model_path={model_dir}",
                                    f"run.name={name}", f"run.out_dir={tmp_path}", *args], cwd=tmp_path, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sampler = threading.Thread(target=_sample, args=([psutil.Process(cluster.pid), psutil.Process(trainer.pid)],
                                                         seen, listening, stop))
        sampler.start()
        yield trainer, node_id, seen, listening, cluster.pid
        stop.set()
        sampler.join()
    finally:
        stop.set()
        cluster.stdin.close()  # the cluster shuts down
        cluster.wait(timeout=60)


def _ledger(run_dir: Path) -> list[dict]:
    return [json.loads(row) for row in (run_dir / "ledger.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("channel", ["ray", "collective"])
def test_workers_run_on_the_second_node_on_loopback(tmp_path, model_dir, channel):
    with _two_node_run(tmp_path, model_dir, "two-nodes", f"async.weight_channel={channel}") as (trainer, node_id,
                                                                                               seen, listening, _):
        _, stderr = trainer.communicate(timeout=400)
        assert trainer.returncode == 0, stderr[-3000:]
    line = next(text for text in stderr.splitlines() if "rollout workers on Ray nodes" in text)
    assert line.count(f"-> {node_id[:8]} (127.0.0.1)") == 2, line  # both workers, on the second node
    ledger = _ledger(tmp_path / "two-nodes")
    groups = [g for row in ledger for g in row["consumed"]]
    assert len(groups) == 4 * 2 and len(set(groups)) == len(groups)  # every step's groups, none twice
    assert all(row["dropped"] == [] for row in ledger)
    assert len({pid for pid, _, _ in listening}) >= 4  # the GCS, two raylets, the trainer at least
    assert [s for s in listening if not _loopback(s[1])] == []
    assert _left_after(seen, 10.0) == []


# more steps than the test waits for: the run is stopped (SIGTERM) once the new actor has joined it, so the
# test does not depend on how long an actor takes to start against how fast the steps go
STEPS = 2000


def _live_actors(cluster_pid: int) -> set[int]:
    """The rollout actors alive now: Ray retitles a worker process ``ray::RolloutActor`` once it
    holds the actor."""
    found = set()
    for member in _family(psutil.Process(cluster_pid)):
        try:
            if " ".join(member.cmdline()).startswith("ray::RolloutActor"):
                found.add(member.pid)
        except psutil.Error:
            continue
    return found


def test_a_killed_worker_is_restarted_on_a_node_with_room(tmp_path, model_dir):
    """SIGKILL of a rollout actor on the second node: the run says so in one line, starts a new
    actor (the head has no CPU for it, so on the second node again) and goes on training every
    prompt group once; stopped by SIGTERM a few steps after the new actor is up, it ends as a stopped
    run does."""
    with _two_node_run(tmp_path, model_dir, "restart", f"trainer.steps={STEPS}") as (trainer, _, _, _, cluster_pid):
        metrics = tmp_path / "restart" / "metrics.jsonl"

        def steps() -> int:
            return metrics.read_text().count("\n") if metrics.exists() else 0

        deadline = time.monotonic() + 300
        while steps() < 3 and trainer.poll() is None:
            assert time.monotonic() < deadline, "run too slow"
            time.sleep(0.1)
        first = _live_actors(cluster_pid)
        assert len(first) == 2, first
        os.kill(min(first), signal.SIGKILL)
        actors, joined_at = set(first), None
        while trainer.poll() is None and (joined_at is None or steps() < joined_at + 3):
            assert time.monotonic() < deadline, f"no new actor, or no step after it: actors {actors}"
            actors |= _live_actors(cluster_pid)
            if joined_at is None and len(actors) == 3:
                joined_at = steps()
            time.sleep(0.2)
        trainer.send_signal(signal.SIGTERM)
        _, stderr = trainer.communicate(timeout=60)
        assert trainer.returncode == 143, stderr[-3000:]  # stopped by the test, not ended by the kill
    assert "stopped by SIGTERM after step" in stderr, stderr[-3000:]
    restarts = [line for line in stderr.splitlines() if "restarting it" in line]
    assert len(restarts) == 1 and "died (Ray: " in restarts[0], stderr[-3000:]
    assert len(actors) == 3, actors  # the two first actors and the new one
    ledger = _ledger(tmp_path / "restart")
    groups = [g for row in ledger for g in row["consumed"]]
    assert [row["step"] for row in ledger] == list(range(1, len(ledger) + 1)) and len(ledger) >= joined_at + 3
    assert len(set(groups)) == len(groups)
