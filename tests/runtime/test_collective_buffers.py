"""The ``collective`` channel's preallocated buffers: publishes reuse them instead of allocating a
flat copy each, a buffer a thread is sending is never rewritten (nor does it block a publish), and a
worker pulling while the trainer publishes as fast as it can never gets two versions mixed."""

from __future__ import annotations

import multiprocessing as mp
import sys
import threading
import time
from pathlib import Path

import torch

from asyncrl.runtime.channels import open_channel

sys.path.insert(0, str(Path(__file__).parent))
from test_channel_dead_worker import Weights  # noqa: E402

SPAWN = mp.get_context("spawn")


def _channel(size: int = 10_000):
    model = Weights(size=size, value=0.0)
    return model, open_channel("collective", model, ctx=SPAWN, device="cpu", dtype=torch.float32)


def test_publishes_rewrite_one_preallocated_buffer():
    model, channel = _channel()
    addresses = set()
    for version in range(1, 11):
        model.fill(float(version))
        channel.publish(model, version)
        addresses.add(channel._current.flat.data_ptr())
    assert channel.allocations == 1 and len(addresses) == 1
    assert channel._current.version == 10 and set(channel._current.flat.tolist()) == {10.0}


def test_a_buffer_being_sent_is_never_rewritten_and_blocks_no_publish():
    model, channel = _channel()
    never = threading.Event()
    held = channel._take(never)  # what a trainer thread answering a pull holds while it sends
    started = time.monotonic()
    for version in range(1, 6):
        model.fill(float(version))
        channel.publish(model, version)
    assert time.monotonic() - started < 2.0
    assert held.version == 0 and set(held.flat.tolist()) == {0.0}
    assert channel._current is not held and channel._current.version == 5
    assert channel.allocations == 2  # the held one, and one the publishes rewrote
    second = channel._take(never)  # a second sender, on version 5
    model.fill(6.0)
    channel.publish(model, 6)
    assert channel.allocations == 3 and set(second.flat.tolist()) == {5.0}
    channel._let_go(held)
    channel._let_go(second)
    for version in range(7, 12):
        model.fill(float(version))
        channel.publish(model, version)
    assert channel.allocations == 3 and len(channel._buffers) == 2  # one published, one spare
    assert set(channel._current.flat.tolist()) == {11.0}


def test_at_the_buffer_cap_a_publish_waits_for_a_send_to_finish():
    """async.channel_buffers=2: with one buffer held by a send and the other published and held by
    a second send, the next publish allocates no third; it waits until a send lets one go."""
    model = Weights(size=1_000, value=0.0)
    channel = open_channel("collective", model, ctx=SPAWN, device="cpu", dtype=torch.float32, max_buffers=2)
    never = threading.Event()
    first = channel._take(never)
    model.fill(1.0)
    channel.publish(model, 1)
    second = channel._take(never)
    assert channel.allocations == 2 and first is not second
    done = threading.Event()

    def publish() -> None:
        model.fill(2.0)
        channel.publish(model, 2)
        done.set()

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    assert not done.wait(0.5)  # both buffers held: the publish waits
    assert channel.allocations == 2 and channel._current is second
    channel._let_go(first)
    assert done.wait(10)
    thread.join(10)
    assert channel.allocations == 2 and channel._current is first and set(first.flat.tolist()) == {2.0}
    assert set(second.flat.tolist()) == {1.0}  # the buffer being sent was never rewritten
    channel._let_go(second)


def test_a_cap_below_two_is_refused():
    import pytest

    with pytest.raises(ValueError, match="max_buffers"):
        open_channel("collective", Weights(size=10), ctx=SPAWN, device="cpu", dtype=torch.float32, max_buffers=1)


def _checked_pulls(channel, results, pulls: int) -> None:
    """Pull ``pulls`` times; report each version and every value the weights held after it."""
    torch.set_num_threads(1)
    model = Weights(size=250_000)
    for _ in range(pulls):
        version = channel.pull(model)
        results.put((version, sorted({float(x) for p in model.parameters() for x in p.detach().unique()})))


def test_pulls_racing_fast_publishes_are_never_torn():
    model, channel = _channel(size=250_000)  # 8 MB: a send spans several publishes' copies
    stop, published = threading.Event(), [0]

    def publish_until_stopped() -> None:
        while not stop.is_set():
            published[0] += 1
            model.fill(float(published[0]))
            channel.publish(model, published[0])

    results = SPAWN.Queue()
    worker = SPAWN.Process(target=_checked_pulls, args=(channel, results, 25))
    worker.start()
    writer = threading.Thread(target=publish_until_stopped, daemon=True)
    writer.start()
    try:
        seen = [results.get(timeout=120) for _ in range(25)]
    finally:
        stop.set()
        writer.join(30)
        worker.join(30)
    assert all(values == [float(version)] for version, values in seen), seen
    versions = [version for version, _ in seen]
    assert versions == sorted(versions) and len(set(versions)) >= 5, versions
    assert channel.allocations <= published[0] // 2  # most publishes reused a buffer
