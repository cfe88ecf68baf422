"""Rollout workers on another node of a Ray cluster: a two-node cluster on 127.0.0.1 (the head with
no CPU for actors, a second node with two), joined through ``RAY_ADDRESS`` by ``asyncrl train
async.backend=ray``, with weights through Ray's object store or the ``collective`` channel. The run places both workers on the second node and says so, trains every
prompt group once (ledger), every Ray process and the trainer listen on loopback only, and nothing
of the cluster outlives its shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
sys.path.insert(0, str(Path(__file__).parent))
from test_ray_loopback import _left_after, _loopback  # noqa: E402

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
        for member in _family(*roots):
            try:
                seen.setdefault(member.pid, (member.create_time(), " ".join(member.cmdline())[:100]))
                listening |= {(member.pid, c.laddr.ip, c.laddr.port) for c in member.net_connections(kind="inet")
                              if c.status == psutil.CONN_LISTEN}
            except psutil.Error:
                continue
        stop.wait(0.2)


@pytest.mark.parametrize("channel", ["ray", "collective"])
def test_workers_run_on_the_second_node_on_loopback(tmp_path, model_dir, channel):
    cluster = subprocess.Popen([sys.executable, str(HERE / "ray_cluster.py")], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=tmp_path)
    seen, listening, stop = {}, set(), threading.Event()
    try:
        address, node_id = cluster.stdout.readline().split()
        env = {**os.environ, "RAY_ADDRESS": address, "HF_HUB_OFFLINE": "1"}
        trainer = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *ARGS, f"policy.model_path={model_dir}",
                                    "run.name=two-nodes", f"run.out_dir={tmp_path}", f"async.weight_channel={channel}"], cwd=tmp_path, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        sampler = threading.Thread(target=_sample, args=([psutil.Process(cluster.pid), psutil.Process(trainer.pid)],
                                                         seen, listening, stop))
        sampler.start()
        _, stderr = trainer.communicate(timeout=400)
        stop.set()
        sampler.join()
        assert trainer.returncode == 0, stderr[-3000:]
    finally:
        stop.set()
        cluster.stdin.close()  # the cluster shuts down
        cluster.wait(timeout=60)
    line = next(text for text in stderr.splitlines() if "rollout workers on Ray nodes" in text)
    assert line.count(f"-> {node_id[:8]} (127.0.0.1)") == 2, line  # both workers, on the second node
    run_dir = tmp_path / "two-nodes"
    ledger = [json.loads(row) for row in (run_dir / "ledger.jsonl").read_text().splitlines()]
    groups = [g for row in ledger for g in row["consumed"]]
    assert len(groups) == 4 * 2 and len(set(groups)) == len(groups)  # every step's groups, none twice
    assert all(row["dropped"] == [] for row in ledger)
    assert len({pid for pid, _, _ in listening}) >= 4  # the GCS, two raylets, the trainer at least
    assert [s for s in listening if not _loopback(s[1])] == []
    assert _left_after(seen, 10.0) == []
