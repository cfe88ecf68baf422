"""RayPool.wait_ready bounds each actor's start, as the local pool bounds each worker's: on CUDA the
actors start one after another (starts_alone), so one bound for all of them together would fail a
run whose every engine starts in time. Stand-in actor handles and a fake clock; no Ray started."""

from types import SimpleNamespace

import pytest
import ray

from asyncrl.runtime.pool import WorkerError
from asyncrl.runtime.ray import backend

BOUND = 100.0


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Ref:
    def __init__(self, ready_at: float):
        self.ready_at = ready_at


def _fake_ray(monkeypatch, clock: Clock) -> None:
    """ray.wait / ray.get over :class:`Ref`: a reference is ready at its ``ready_at`` on the clock;
    waiting moves the clock on."""

    def wait(refs, num_returns=1, timeout=None):
        until = clock.now + (timeout if timeout is not None else float("inf"))
        done = [r for r in refs if r.ready_at <= until]
        if len(done) >= num_returns:
            clock.now = max(clock.now, sorted(r.ready_at for r in done)[num_returns - 1])
            return done[:num_returns], [r for r in refs if r not in done[:num_returns]]
        clock.now = until
        return done, [r for r in refs if r not in done]

    def get(refs, timeout=None):
        many = isinstance(refs, list)
        latest = max(r.ready_at for r in (refs if many else [refs]))
        if timeout is not None and latest > clock.now + timeout:
            clock.now += timeout
            raise ray.exceptions.GetTimeoutError("timed out")
        clock.now = max(clock.now, latest)
        return [True] * len(refs) if many else True

    monkeypatch.setattr(backend.ray, "wait", wait)
    monkeypatch.setattr(backend.ray, "get", get)
    monkeypatch.setattr(backend.time, "monotonic", clock)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def _pool(ready_at: list[float], device: str) -> backend.RayPool:
    pool = object.__new__(backend.RayPool)  # its actors are the stand-ins below, not Ray's
    pool.specs = {i: SimpleNamespace(worker_id=i, config={"policy": {"device": device}}) for i in range(len(ready_at))}
    pool.actors = {i: SimpleNamespace(ready=SimpleNamespace(remote=lambda t=t: Ref(t))) for i, t in enumerate(ready_at)}
    pool.start_timeout_s = BOUND
    return pool


def test_actors_that_start_one_after_another_each_get_the_bound(monkeypatch):
    _fake_ray(monkeypatch, Clock())
    # on CUDA each actor starts once the one before it is ready: 0.6 of the bound each
    assert _pool([0.6 * BOUND, 1.2 * BOUND, 1.8 * BOUND], "cuda").wait_ready() == []


def test_an_actor_slower_than_the_bound_from_its_own_start_is_named(monkeypatch):
    clock = Clock()
    _fake_ray(monkeypatch, clock)
    with pytest.raises(WorkerError, match=r"rollout worker 1 .* 100 s .*async.worker_start_timeout_s"):
        _pool([0.6 * BOUND, 1.7 * BOUND, 1.8 * BOUND], "cuda").wait_ready()
    assert clock.now == pytest.approx(1.6 * BOUND)  # worker 1's start began at 0.6 of the bound


def test_actors_that_start_together_share_the_moment_they_began(monkeypatch):
    clock = Clock()
    _fake_ray(monkeypatch, clock)
    assert _pool([0.6 * BOUND, 0.9 * BOUND], "cpu").wait_ready() == []
    clock.now = 0.0
    with pytest.raises(WorkerError, match="rollout worker 1 "):
        _pool([0.6 * BOUND, 1.2 * BOUND], "cpu").wait_ready()
