"""The ``collective`` channel's pairs under faults: every pair has a short timeout on every backend,
the trainer's NCCL pairs are built so that a failed collective ends only their thread, building one
leaves the process's environment alone, a worker the pool reports dead has its pair ended (and
aborted on NCCL) while publishing goes on, and the channel is refused where NCCL would put two ranks
on one GPU. NCCL parts are checked with a fake ProcessGroupNCCL (these machines have no GPU); the
rest runs gloo pairs on loopback."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from asyncrl.runtime.channels import collective, open_channel

sys.path.insert(0, str(Path(__file__).parent))
from test_channel_dead_worker import Weights  # noqa: E402

SPAWN = mp.get_context("spawn")
ERROR_HANDLING = "TORCH_NCCL_ASYNC_ERROR_HANDLING"


class _Options:
    def __init__(self):
        self._timeout = None
        self._devices = None


class FakeBackend:
    """Records how a pair was built: rank, size, the options' timeout and the NCCL environment then."""

    Options = _Options
    _Options = _Options
    built: list = []

    def __init__(self, store, rank, size, options):
        FakeBackend.built.append((rank, size, options._timeout, {k: os.environ.get(k) for k in collective.PAIR_NCCL_ENV}))

    @staticmethod
    def create_device(**_):
        return "device"

    create_default_device = create_device


@pytest.fixture
def fake_backends(monkeypatch):
    FakeBackend.built = []
    monkeypatch.setattr(torch.distributed, "ProcessGroupNCCL", FakeBackend, raising=False)
    monkeypatch.setattr(torch.distributed, "ProcessGroupGloo", FakeBackend)
    monkeypatch.setenv(ERROR_HANDLING, "1")  # the user's own setting for the trainer's other groups
    monkeypatch.setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "placeholder")  # so that the value a test sets is undone
    monkeypatch.delenv("TORCH_NCCL_DUMP_ON_TIMEOUT")
    return FakeBackend.built


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_every_pair_is_built_with_the_short_timeout(fake_backends, device):
    store = torch.distributed.HashStore()
    for rank in (0, 1):
        collective._pair(store, 3, rank, torch.device(device), "127.0.0.1")
    assert [(rank, size, timeout) for rank, size, timeout, _ in fake_backends] == \
        [(0, 2, collective.PAIR_TIMEOUT), (1, 2, collective.PAIR_TIMEOUT)]
    assert collective.PAIR_TIMEOUT <= datetime.timedelta(minutes=2)


def test_the_trainers_nccl_pair_ends_only_its_thread_on_a_failed_collective(fake_backends, monkeypatch):
    """The trainer's pairs are built with clean-up-only error handling, read by ProcessGroupNCCL when
    it is built: the channel sets it once, as it opens on CUDA (before its threads start), replacing
    the user's value for the trainer's process. A worker, which inherits that environment, takes the
    user's values back first thing (its end keeps them: it ends and is restarted)."""
    from asyncrl.distributed import nccl_env

    monkeypatch.setenv(nccl_env.SAVED_ENV, "placeholder")
    monkeypatch.delenv(nccl_env.SAVED_ENV)
    channel = collective.CollectiveWeights(Weights(size=10), device="cuda", dtype=torch.float32)
    channel.close()
    store = torch.distributed.HashStore()
    collective._pair(store, 0, 0, torch.device("cuda"), "127.0.0.1")
    trainer_env = fake_backends[-1][3]
    assert trainer_env == {ERROR_HANDLING: "2", "TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}
    worker = dict(os.environ)
    nccl_env.restore_env(worker)  # what worker_main does before anything else
    assert {k: worker.get(k) for k in collective.PAIR_NCCL_ENV} == {ERROR_HANDLING: "1",
                                                                   "TORCH_NCCL_DUMP_ON_TIMEOUT": None}
    assert nccl_env.SAVED_ENV not in worker


def test_building_a_pair_leaves_the_environment_alone(fake_backends, monkeypatch):
    """os.environ is the whole process's: a pair built in a serving thread of the trainer must not
    change it, not even while it is being built, when another thread (one starting a worker process
    or a process group of its own) would read the pair's values instead of its own."""
    entered, release = threading.Event(), threading.Event()

    class Blocking(FakeBackend):
        def __init__(self, *args):
            super().__init__(*args)
            entered.set()
            release.wait(10)

    monkeypatch.setattr(torch.distributed, "ProcessGroupNCCL", Blocking, raising=False)
    before = dict(os.environ)
    builder = threading.Thread(target=collective._pair,
                               args=(torch.distributed.HashStore(), 0, 0, torch.device("cuda"), "127.0.0.1"))
    builder.start()
    assert entered.wait(10)
    during = dict(os.environ)
    release.set()
    builder.join(10)
    assert {k: during.get(k) for k in collective.PAIR_NCCL_ENV} == {k: before.get(k) for k in collective.PAIR_NCCL_ENV}
    assert during == before and dict(os.environ) == before


def test_a_gloo_pair_whose_peer_stops_fails_after_the_timeout(monkeypatch):
    monkeypatch.setattr(collective, "PAIR_TIMEOUT", datetime.timedelta(seconds=2))
    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    groups = {}

    def build(rank: int) -> None:  # each end with a store connection of its own, as the channel's are
        store = torch.distributed.TCPStore("127.0.0.1", server.port, is_master=False)
        groups[rank] = collective._pair(store, 0, rank, torch.device("cpu"), "127.0.0.1")

    builders = [threading.Thread(target=build, args=(rank,)) for rank in (0, 1)]
    for thread in builders:
        thread.start()
    for thread in builders:
        thread.join(30)
    started = time.monotonic()
    with pytest.raises(RuntimeError):  # rank 1 never takes it: 64 MB outlast the socket buffers
        collective._broadcast(groups[0], torch.zeros(1 << 24))
    assert time.monotonic() - started < 30


def _pull_then_idle(channel, pulled) -> None:
    channel.pull(Weights(size=1000))
    pulled.set()
    time.sleep(600)


def _pull(channel, results) -> None:
    model = Weights(size=1000)
    version = channel.pull(model)
    results.put((version, sorted({float(x) for p in model.parameters() for x in p.detach().unique()})))


def _thread(channel, name: str) -> threading.Thread:
    return next(t for t in channel._threads if t.name == name)


def test_a_worker_reported_dead_has_its_pair_ended_and_publishing_goes_on():
    model = Weights(size=1000, value=1.0)
    channel = open_channel("collective", model, ctx=SPAWN, device="cpu", dtype=torch.float32)
    pulled = SPAWN.Event()
    worker = SPAWN.Process(target=_pull_then_idle, args=(channel, pulled))
    worker.start()
    assert pulled.wait(60)
    serving = _thread(channel, "weights-0")
    assert [pair.who for pair in channel._pairs.values()] == [f"{socket.gethostname()}/{worker.pid}"]
    os.kill(worker.pid, signal.SIGKILL)
    worker.join(30)
    time.sleep(0.5)
    assert serving.is_alive()  # idle between pulls, it would wait for the dead worker's next pull for good
    channel.worker_lost(worker.pid)
    serving.join(5)
    assert not serving.is_alive() and not channel._pairs
    for version in (1, 2, 3):
        model.fill(float(version))
        channel.publish(model, version)
    results = SPAWN.Queue()
    fresh = SPAWN.Process(target=_pull, args=(channel, results))
    fresh.start()
    assert results.get(timeout=60) == (3, [3.0])
    fresh.join(30)
    assert _thread(channel, "weights-1").is_alive()  # a live worker's pair is left alone
    channel.worker_lost(worker.pid + 10_000_000)  # no such worker: nothing ends
    assert len(channel._pairs) == 1


class FakeNcclGroup:
    aborted = False

    def abort(self) -> None:
        self.aborted = True


def test_worker_lost_aborts_an_nccl_pair_of_that_worker_only():
    channel = open_channel("collective", Weights(size=8), ctx=SPAWN, device="cpu", dtype=torch.float32)
    channel.device = torch.device("cuda")  # as the trainer's NCCL pairs are (nothing is sent here)
    host = socket.gethostname()
    pairs = {peer: collective._Pair(FakeNcclGroup(), who, threading.Event())
             for peer, who in enumerate([f"{host}/4242", "other-node/4242", f"{host}/4343"])}
    channel._pairs.update(pairs)
    channel.worker_lost(4242)
    assert [(pair.group.aborted, pair.stop.is_set()) for pair in pairs.values()] == \
        [(True, True), (False, False), (False, False)]
    assert sorted(channel._pairs) == [1, 2]
    channel.worker_lost(4242, host="other-node")
    assert pairs[1].group.aborted and sorted(channel._pairs) == [2]


class _DeadProcess:
    pid, exitcode = 4242, -9

    def is_alive(self) -> bool:
        return False


class _RecordingChannel:
    def __init__(self):
        self.lost = []

    def worker_lost(self, pid: int) -> None:
        self.lost.append(pid)


def test_the_pool_reports_a_dead_worker_to_its_channel(monkeypatch):
    from asyncrl.runtime.pool import WorkerPool

    pool = WorkerPool.__new__(WorkerPool)  # its state only: no worker processes
    pool.processes, pool.inflight, pool.specs = {0: _DeadProcess()}, {0: {}}, {0: None}
    pool.restarts, pool.causes, pool.channel = 0, {}, _RecordingChannel()
    started = []
    monkeypatch.setattr(pool, "kill_stuck", lambda: None)
    monkeypatch.setattr(pool, "_start", started.append)
    assert pool.restart_dead() == []
    assert pool.channel.lost == [4242] and started == [0]


def test_collective_with_workers_on_the_trainers_gpu_is_refused_in_one_line():
    from asyncrl.config import ConfigError
    from asyncrl.runtime.channels import CHANNELS, channel_name
    from asyncrl.runtime.validate import load_run_config

    with pytest.raises(ConfigError) as refused:
        load_run_config(overrides=["policy.device=cuda", "async.weight_channel=collective"])
    message = str(refused.value)
    assert "\n" not in message and "async.weight_channel: 'collective' needs rollout workers" in message
    assert "NCCL refuses two ranks on one GPU" in message and "use async.weight_channel=cuda or auto" in message
    assert CHANNELS["collective"].refuses("local", "cuda:1") is not None
    assert CHANNELS["collective"].refuses("local", "cpu") is None  # gloo pairs
    assert CHANNELS["collective"].refuses("ray", "cuda") is None  # actors may have GPUs of their own
    assert channel_name("auto", "local", "cuda") == "cuda"  # auto never picks it
