"""``async.backend=ray`` without ``RAY_ADDRESS``: the run's private Ray cluster listens on loopback
only (every listening socket of the trainer and of all its descendants, sampled through the run),
and none of its processes outlives the run, whether it ends normally or its trainer is SIGKILLed
(the raylet's agents used to wait a minute on the dead GCS). With ``RAY_ADDRESS`` the address is
left as the user set it up."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process and socket tables")

ARGS = ["run.progress=false", "run.tensorboard=false", "run.mode=async", "async.backend=ray",
        "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
        "trainer.n_minibatches=1", "eval.n_problems=2", "eval.samples=1", "eval.every=0",
        "task.arithmetic.n_train=40", "task.arithmetic.n_eval=4"]
GONE_WITHIN_S = 10.0


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_loopback or getattr(address, "ipv4_mapped", None) is not None and address.ipv4_mapped.is_loopback


def note(members: list, seen: dict, listening: set) -> None:
    """Add each process to ``seen`` (pid -> (start time, command line)) and its listening sockets
    to ``listening`` ((pid, address, port)); a process that ended meanwhile is skipped."""
    for member in members:
        try:
            seen.setdefault(member.pid, (member.create_time(), " ".join(member.cmdline())[:100]))
            listening |= {(member.pid, c.laddr.ip, c.laddr.port) for c in member.net_connections(kind="inet")
                          if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue


def _watch(proc: subprocess.Popen, kill_after_rows: int | None, metrics: Path) -> tuple[dict, set]:
    """Until the run ends (or, with ``kill_after_rows``, until metrics.jsonl has that many rows,
    then SIGKILL): the processes seen, pid -> (start time, command line), and the listening
    sockets, (pid, address, port)."""
    seen, listening = {}, set()
    root = psutil.Process(proc.pid)
    deadline = time.monotonic() + 400
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            family = [root, *root.children(recursive=True)]
        except psutil.Error:
            break
        note(family, seen, listening)
        if kill_after_rows and metrics.exists() and metrics.read_text().count("\n") >= kill_after_rows:
            proc.kill()
            break
        time.sleep(0.2)
    proc.wait(timeout=60)
    seen.pop(proc.pid, None)
    return seen, listening


def _left_after(seen: dict, bound_s: float) -> list[str]:
    """The seen processes still alive after ``bound_s`` (then killed)."""
    def alive() -> list[int]:
        out = []
        for pid, (started, _) in seen.items():
            try:
                member = psutil.Process(pid)
                if member.create_time() == started and member.status() != psutil.STATUS_ZOMBIE:
                    out.append(pid)
            except psutil.Error:
                continue
        return out

    deadline = time.monotonic() + bound_s
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = alive()
    for pid in left:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            continue
    return [seen[pid][1] for pid in left]


def _run(tmp_path: Path, model_dir: Path, name: str, steps: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    return subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *ARGS, f"trainer.steps={steps}",
                             f"policy.model_path={model_dir}", f"run.name={name}", f"run.out_dir={tmp_path}"],
                            cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_ray_run_listens_on_loopback_only_and_leaves_nothing(tmp_path, model_dir):
    proc = _run(tmp_path, model_dir, "loopback", steps=3)
    seen, listening = _watch(proc, None, tmp_path / "loopback" / "metrics.jsonl")
    assert proc.returncode == 0, proc.stderr.read()[-3000:]
    assert len({pid for pid, _, _ in listening}) >= 3  # at least the GCS, the raylet and the trainer
    assert [s for s in listening if not _loopback(s[1])] == []
    assert _left_after(seen, GONE_WITHIN_S) == []


@pytest.mark.slow
def test_nothing_of_ray_outlives_a_sigkilled_trainer(tmp_path, model_dir):
    proc = _run(tmp_path, model_dir, "killed", steps=500)
    seen, _ = _watch(proc, 2, tmp_path / "killed" / "metrics.jsonl")
    assert proc.returncode == -9, proc.stderr.read()[-3000:]
    assert any("raylet" in command for _, command in seen.values())  # Ray's processes were seen
    assert _left_after(seen, GONE_WITHIN_S) == []


def test_a_private_cluster_starts_on_loopback_and_a_named_address_is_left_alone(monkeypatch):
    import ray

    from asyncrl.runtime.ray import cluster

    calls = []

    def fake_init(**kwargs):
        flag = ray._private.ray_constants.ENABLE_RAY_CLUSTER
        calls.append((kwargs, os.environ.get(cluster.SINGLE_MACHINE_ENV), flag))

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", fake_init)
    monkeypatch.setattr(cluster, "start_ray_reaper", lambda ray_dir, temp_dir: None)
    monkeypatch.setattr(cluster, "new_temp_dir", lambda: "/nowhere")  # no cluster starts: no folder made
    monkeypatch.setattr(cluster, "_temp_dir", None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv(cluster.SINGLE_MACHINE_ENV, raising=False)
    flag_before = ray._private.ray_constants.ENABLE_RAY_CLUSTER
    assert cluster.init_ray(1)
    kwargs, env, flag = calls[-1]
    assert kwargs["_node_ip_address"] == "127.0.0.1" and kwargs["include_dashboard"] is False
    assert env == "0" and flag is False  # a loopback node address stays loopback
    assert cluster.SINGLE_MACHINE_ENV not in os.environ  # restored after the start
    assert ray._private.ray_constants.ENABLE_RAY_CLUSTER == flag_before
    monkeypatch.setenv("RAY_ADDRESS", "10.1.2.3:6379")
    assert cluster.init_ray(1)
    kwargs, env, flag = calls[-1]
    assert kwargs["address"] == "10.1.2.3:6379" and "_node_ip_address" not in kwargs
    assert env is None and flag == flag_before
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")  # a cluster on loopback: joined as loopback
    assert cluster.init_ray(1)
    kwargs, env, flag = calls[-1]
    assert kwargs["address"] == "127.0.0.1:6379" and kwargs["_node_ip_address"] == "127.0.0.1"
    assert env == "0" and flag is False
