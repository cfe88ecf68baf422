"""The ``collective`` weight channel (gloo pairs on loopback): workers in other processes pull exactly
the published weights and version; a worker stopped mid-pull, then SIGKILLed, blocks no publish, and
the next worker pulls the newest version; a worker leaves its pair before its interpreter finalizes."""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

from asyncrl.runtime.channels import open_channel

sys.path.insert(0, str(Path(__file__).parent))
from test_channel_dead_worker import Weights  # noqa: E402

SPAWN = mp.get_context("spawn")


def _puller(channel, results, pulls: int, size: int) -> None:
    """Pull ``pulls`` times; report each version and the first and last value of every tensor."""
    model = Weights(size=size)
    for _ in range(pulls):
        version = channel.pull(model)
        results.put((version, [float(p[0]) for p in model.parameters()], [float(p[-1]) for p in model.parameters()]))


def _stalled(channel, joined) -> None:
    """Join the channel, ask for a pull and never take it: a worker stopped mid-pull."""
    store = channel._client()
    peer, group = channel._join()  # noqa: F841 (kept open)
    store.set(f"peer{peer}/pull0", "1")
    joined.set()
    time.sleep(600)


def test_workers_pull_what_was_published():
    model = Weights(size=50_000, value=1.0)
    channel = open_channel("collective", model, ctx=SPAWN, device="cpu", dtype=torch.float32)
    results = SPAWN.Queue()
    workers = [SPAWN.Process(target=_puller, args=(channel, results, 1, 50_000)) for _ in range(2)]
    for w in workers:
        w.start()
    got = [results.get(timeout=60) for _ in workers]
    assert got == [(0, [1.0] * 8, [1.0] * 8)] * 2
    model.fill(3.0)
    channel.publish(model, 7)
    assert channel.latest() == 7
    late = SPAWN.Process(target=_puller, args=(channel, results, 1, 50_000))
    late.start()
    assert results.get(timeout=60) == (7, [3.0] * 8, [3.0] * 8)
    for w in [*workers, late]:
        w.join(timeout=30)
        assert w.exitcode == 0


def _native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _leaver(channel, report: str) -> None:
    """Pull once and return, as a worker does; write the process's native threads before the pull,
    after it, and at exit once the channel's exit function ran (registered before the pull, ours
    runs after it)."""
    model = Weights(size=4096)
    counts = [_native_threads()]
    atexit.register(lambda: Path(report).write_text(" ".join(map(str, [*counts, _native_threads()]))))
    channel.pull(model)
    counts.append(_native_threads())


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_worker_leaves_its_pair_at_exit_before_the_interpreter_finalizes(tmp_path):
    """gloo's threads must be joined while the interpreter is whole: one still letting go of a pull's
    tensors during finalization takes the GIL and aborts the worker (SIGABRT at exit)."""
    channel = open_channel("collective", Weights(), ctx=SPAWN, device="cpu", dtype=torch.float32)
    report = tmp_path / "threads"
    worker = SPAWN.Process(target=_leaver, args=(channel, str(report)))
    worker.start()
    worker.join(timeout=60)
    assert worker.exitcode == 0
    before, pulled, at_exit = map(int, report.read_text().split())
    assert pulled > before  # the pair's threads ran
    assert at_exit == before  # and were joined before the interpreter finalized


def test_a_worker_killed_mid_pull_blocks_no_publish():
    model = Weights(size=2_000_000, value=0.0)  # 64 MB: more than the sockets buffer, so the send waits
    channel = open_channel("collective", model, ctx=SPAWN, device="cpu", dtype=torch.float32)
    joined = SPAWN.Event()
    stalled = SPAWN.Process(target=_stalled, args=(channel, joined))
    stalled.start()
    assert joined.wait(60)
    time.sleep(1.0)  # the trainer's thread is now sending to it
    os.kill(stalled.pid, signal.SIGKILL)
    stalled.join()
    started = time.monotonic()
    for version in range(1, 6):
        model.fill(float(version))
        channel.publish(model, version)
    assert time.monotonic() - started < 5.0  # five publishes, none waiting on the dead worker
    results = SPAWN.Queue()
    worker = SPAWN.Process(target=_puller, args=(channel, results, 1, 2_000_000))
    worker.start()
    assert results.get(timeout=60) == (5, [5.0] * 8, [5.0] * 8)
    worker.join(timeout=30)


def test_the_channel_listens_on_loopback_only():
    psutil = pytest.importorskip("psutil")
    channel = open_channel("collective", Weights(), ctx=SPAWN, device="cpu", dtype=torch.float32)
    results = SPAWN.Queue()
    worker = SPAWN.Process(target=_puller, args=(channel, results, 1, 4096))
    worker.start()
    assert results.get(timeout=60)[0] == 0
    listening = [c.laddr for c in psutil.Process().net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert any(addr.port == channel.port for addr in listening)
    assert all(addr.ip in ("127.0.0.1", "::ffff:127.0.0.1") for addr in listening), listening
    worker.join(timeout=30)


@pytest.mark.slow
def test_an_async_run_through_the_collective_channel_equals_one_through_shared_memory(tmp_path, cache):
    """K = 0: the workers generate from exactly the trainer's weights, so the two channels train to
    the same weights bit for bit."""
    from test_modes_e2e import train, weights

    shm_dir, _ = train(tmp_path, cache, "shm", "run.mode=async", "async.max_staleness=0", "trainer.steps=3")
    coll_dir, records = train(tmp_path, cache, "coll", "run.mode=async", "async.max_staleness=0", "trainer.steps=3",
                              "async.weight_channel=collective")
    assert len(records) == 3 and any(r.get("weight_pull_s", 0) > 0 for r in records)  # weights did move
    a, b = weights(shm_dir), weights(coll_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
