"""The flat weight channel without a lock: a worker SIGKILLed mid-pull blocks no publish, and a
pull racing a writer that publishes as fast as it can never returns a mix of two versions."""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import os
import random
import signal
import threading
import time
from typing import Any

import pytest
import torch

from asyncrl.runtime.channels.flat import CudaIpcWeights, HostSharedWeights

SPAWN = mp.get_context("spawn")


class Weights(torch.nn.Module):
    """Eight 1-D tensors of ``size`` (a layout of several tensors, so a copy can stop between two)."""

    def __init__(self, size: int = 4096, value: float = 0.0):
        super().__init__()
        self.chunks = torch.nn.ParameterList(torch.nn.Parameter(torch.full((size,), value)) for _ in range(8))

    @torch.no_grad()
    def fill(self, value: float) -> None:
        for p in self.parameters():
            p.fill_(value)


@dataclasses.dataclass
class StallingWeights(HostSharedWeights):
    """Copies the first tensor of a pull, sets ``stalled`` and sleeps: a worker stopped mid-pull."""

    stalled: Any = None  # multiprocessing Event; None: pull normally

    def _copy_out(self, destinations, sources):
        if self.stalled is None:
            return super()._copy_out(destinations, sources)
        super()._copy_out(destinations[:1], sources[:1])
        self.stalled.set()
        time.sleep(600)


def copy_slowly(destinations, sources) -> None:
    """One tensor at a time with a short sleep between: a copy that a fast writer overtakes."""
    for destination, source in zip(destinations, sources):
        torch._foreach_copy_([destination], [source])
        time.sleep(0.0003)


@dataclasses.dataclass
class SlowWeights(HostSharedWeights):
    def _copy_out(self, destinations, sources):
        copy_slowly(destinations, sources)


@dataclasses.dataclass
class SlowCudaWeights(CudaIpcWeights):
    def _copy_out(self, destinations, sources):
        copy_slowly(destinations, sources)


def pull_once(channel, model, results) -> None:
    torch.set_num_threads(1)
    version = channel.pull(model)
    results.put((version, sorted({float(x) for p in model.parameters() for x in p.detach().unique()})))


def publish_until(channel, model, stop, device) -> None:
    """Publish versions 1, 2, ... with every weight equal to the version, until ``stop``."""
    torch.set_num_threads(1)
    model = model.to(device)
    version = 0
    while not stop.is_set():
        version += 1
        model.fill(version)
        channel.publish(model, version)
        time.sleep(random.uniform(0, 0.004))


def publish_within(channel, model, version: int, seconds: float) -> bool:
    """Publish from a thread; whether it finished within ``seconds`` (a blocked publish never does)."""
    thread = threading.Thread(target=channel.publish, args=(model, version), daemon=True)
    thread.start()
    thread.join(seconds)
    return not thread.is_alive()


def test_publish_completes_after_a_worker_dies_mid_pull():
    trainer = Weights(value=1.0)
    channel = StallingWeights.create(trainer, SPAWN)
    channel.stalled = SPAWN.Event()
    channel.publish(trainer, 1)
    results = SPAWN.Queue()
    worker = SPAWN.Process(target=pull_once, args=(channel, Weights(), results), daemon=True)
    worker.start()
    try:
        assert channel.stalled.wait(120), "the worker never reached the middle of its pull"
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(30)
        assert worker.exitcode == -signal.SIGKILL
    finally:
        if worker.is_alive():
            worker.kill()
    # version 3 rewrites the very buffer the dead worker was copying from
    for version in (2, 3):
        trainer.fill(version)
        assert publish_within(channel, trainer, version, seconds=2.0), f"publish {version} blocked"
    assert channel.latest() == 3
    fresh = SPAWN.Process(target=pull_once, args=(dataclasses.replace(channel, stalled=None), Weights(), results),
                          daemon=True)
    fresh.start()
    try:
        assert results.get(timeout=120) == (3, [3.0])
        fresh.join(30)
    finally:
        if fresh.is_alive():
            fresh.kill()


def test_a_live_worker_stopped_mid_pull_blocks_no_publish():
    """The same without the kill: publishes go on while a reader sits inside its copy."""
    trainer = Weights(value=1.0)
    channel = StallingWeights.create(trainer, SPAWN)
    channel.stalled = threading.Event()
    channel.publish(trainer, 1)
    reader = threading.Thread(target=channel.pull, args=(Weights(),), daemon=True)
    reader.start()
    assert channel.stalled.wait(10)
    for version in (2, 3, 4):
        trainer.fill(version)
        assert publish_within(channel, trainer, version, seconds=2.0), f"publish {version} blocked"
    assert reader.is_alive() and channel.latest() == 4


def race(channel, device: str) -> list[int]:
    """A writer process publishes as fast as it can while this process pulls (at most 300 times in
    8 s); checks every pull and returns the versions seen."""
    stop = SPAWN.Event()
    writer = SPAWN.Process(target=publish_until, args=(channel, Weights(), stop, device), daemon=True)
    writer.start()
    reader, seen = Weights().to(device), []
    try:
        deadline = time.monotonic() + 120
        while channel.latest() < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        deadline = time.monotonic() + 8
        while len(seen) < 300 and time.monotonic() < deadline:
            version = channel.pull(reader)
            values = {float(x) for p in reader.parameters() for x in p.detach().unique()}
            assert values == {float(version)}, f"pull {len(seen)} returned version {version} with {sorted(values)}"
            seen.append(version)
    finally:
        stop.set()
        writer.join(30)
        if writer.is_alive():
            writer.kill()
    assert len(seen) >= 100, f"only {len(seen)} pulls in time"
    assert seen == sorted(seen) and len(set(seen)) >= 20, "the writer hardly moved during the pulls"
    assert channel.retries > 0, "no pull raced a rewrite of its buffer: the test exercised nothing"
    return seen


def test_pulls_racing_a_writer_are_never_torn():
    assert race(SlowWeights.create(Weights(), SPAWN), "cpu")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_pulls_racing_a_writer_are_never_torn():
    """float32, so that every version up to 2**24 is exact."""
    channel = SlowCudaWeights.create(Weights(), SPAWN, device="cuda", dtype=torch.float32)
    assert race(channel, "cuda")


def test_pull_gives_up_with_one_line_when_always_overtaken(monkeypatch):
    """A writer publishing twice during every copy: the pull raises instead of spinning forever."""
    from asyncrl.runtime.channels import flat

    trainer = Weights(size=8)
    channel = HostSharedWeights.create(trainer, SPAWN)
    channel.publish(trainer, 1)

    def overtaken_copy(destinations, sources):
        torch._foreach_copy_(destinations, sources)
        for version in (2, 3):
            channel.publish(trainer, version)

    monkeypatch.setattr(channel, "_copy_out", overtaken_copy)
    monkeypatch.setattr(flat, "PULL_RETRY_SLEEP_S", 0.0)
    with pytest.raises(RuntimeError, match="rewritten during each of 100 copies"):
        channel.pull(Weights(size=8))
    assert channel.retries == flat.PULL_ATTEMPTS
