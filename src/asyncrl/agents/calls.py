"""Environment and tool calls of many episodes at once, for the episode scheduler.

An environment that answers after a quarter of a second (a container, a remote API, a judge)
costs a quarter of a second per turn when its calls overlap, and a quarter of a second per turn
*per episode* when they are paid one after another. :class:`CallPool` overlaps them:

* ``async def`` methods run on **one event loop** per process, in a daemon thread of its own
  (every environment's coroutines share it, as an asyncio client library expects);
* plain functions each run in a daemon thread (:func:`asyncrl.core.user_code.in_thread`), at most
  ``concurrency`` calls in flight in all (``env.concurrency``); calls past the bound queue, in
  submission order;
* each call has a time limit, the one of :mod:`asyncrl.core.user_code`: the call is stopped at it
  (a coroutine cancelled), and the pool stops waiting for one stuck in C code. A call that raises or runs past it is retried ``retries`` times
  after ``backoff_s``, 2 × ``backoff_s``, ...; then it is a :class:`Failed` outcome, which the
  scheduler turns into a failed episode. A call whose result breaks the environment's contract
  is not retried: the checks raise :class:`~asyncrl.agents.env.EnvError` in the scheduler.

The pool never blocks the thread that drives it except in :meth:`CallPool.wait`, so the engine
decodes the episodes that are ready while the others' calls run.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import inspect
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from asyncrl.core.user_code import Exited, TimedOut, bounded_coroutine, first_line, in_thread

__all__ = ["CallPool", "Failed", "event_loop"]


@dataclass(frozen=True)
class Failed:
    """A call that raised or timed out on its last try; ``reason`` is one line (``raised KeyError:
    'board'``, ``took longer than 0.3 s``, ``exited (SystemExit 3)``)."""

    reason: str


_loop_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def event_loop() -> asyncio.AbstractEventLoop:
    """The process's event loop for ``async def`` environments and tools, started on first use in
    a daemon thread. One loop: an environment's async client (an HTTP session, a sandbox pool)
    may be shared between episodes only when all of them run on the same loop."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, daemon=True, name="asyncrl-env-loop").start()
            _loop = loop
        return _loop


def _reason(err: BaseException) -> str:
    if isinstance(err, Exited):
        return str(err)
    if not isinstance(err, Exception):  # SystemExit, KeyboardInterrupt raised by the call itself
        return str(Exited(err))
    return f"raised {first_line(err)}"


def is_async(fn: Callable) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))


def _took_too_long(call: "_Call") -> str:
    return f"took longer than {call.limit}={call.timeout_s:g} s"


@dataclass
class _Call:
    key: Any
    fn: Callable
    args: tuple
    timeout_s: float | None
    retries: int
    limit: str
    tries: int = 0
    deadline: float = float("inf")
    future: concurrent.futures.Future | None = None


class CallPool:
    """Runs calls (``submit``) and hands back their outcomes (``wait``) as they finish, in any
    order. ``concurrency``: calls in flight at most; ``backoff_s``: the first retry's delay."""

    def __init__(self, concurrency: int, backoff_s: float = 1.0):
        if concurrency < 1:
            raise ValueError("concurrency: must be >= 1")
        self.concurrency, self.backoff_s = concurrency, backoff_s
        self.queued: deque[_Call] = deque()
        self.running: dict[concurrent.futures.Future, _Call] = {}
        self.delayed: list[tuple[float, int, _Call]] = []  # (not before, tie-break, call): retries waiting
        self.order = itertools.count()
        self.max_in_flight = 0  # the most calls running at once (a metric: env/calls_in_flight_max)
        self.retried = 0  # tries after a failure
        self.failed = 0  # calls that failed on their last try

    @property
    def pending(self) -> int:
        """Calls submitted whose outcome has not been handed back."""
        return len(self.queued) + len(self.running) + len(self.delayed)

    def submit(self, key: Any, fn: Callable, args: tuple = (), *, timeout_s: float | None = None,
               retries: int = 0, limit: str = "the limit") -> None:
        """Run ``fn(*args)``; its outcome comes back from :meth:`wait` with ``key``. ``limit``: the
        name of the time limit in a timeout's reason (``env.step_timeout_s``)."""
        self.queued.append(_Call(key, fn, args, timeout_s, retries, limit))
        self._start_queued()

    def _start_queued(self) -> None:
        now = time.monotonic()
        while self.delayed and self.delayed[0][0] <= now:
            self.queued.appendleft(heapq.heappop(self.delayed)[2])  # a retry goes before new calls
        while self.queued and len(self.running) < self.concurrency:
            self._start(self.queued.popleft())
        self.max_in_flight = max(self.max_in_flight, len(self.running))

    def _start(self, call: _Call) -> None:
        call.tries += 1
        if is_async(call.fn):
            future = asyncio.run_coroutine_threadsafe(bounded_coroutine(call.fn, call.args, call.timeout_s),
                                                      event_loop())
            call.deadline = float("inf")  # cancelled on the loop at its limit
        else:
            future = in_thread(call.fn, call.args, call.timeout_s, loop=event_loop, name="asyncrl-env-call")
            call.deadline = float("inf") if call.timeout_s is None else time.monotonic() + call.timeout_s
        call.future = future
        self.running[future] = call

    def wait(self, timeout: float | None = None) -> list[tuple[Any, Any]]:
        """The outcomes of calls that have finished: ``(key, value)``, or ``(key, Failed)`` after the
        last try. Blocks until at least one outcome is ready or ``timeout`` passes ([] then)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            self._start_queued()
            out = self._collect()
            if out or not self.pending:
                return out
            now = time.monotonic()
            wake = min([c.deadline for c in self.running.values()] + [d[0] for d in self.delayed[:1]]
                       + ([end] if end is not None else []))
            if end is not None and now >= end:
                return []
            pause = None if wake == float("inf") else max(0.0, wake - now)
            if self.running:
                concurrent.futures.wait(list(self.running), timeout=pause,
                                        return_when=concurrent.futures.FIRST_COMPLETED)
            elif pause:
                time.sleep(pause)

    def _collect(self) -> list[tuple[Any, Any]]:
        now, out = time.monotonic(), []
        for future, call in list(self.running.items()):
            if future.done():
                del self.running[future]
                err = future.exception()
                if err is None:
                    out.append((call.key, future.result()))
                    continue
                reason = _took_too_long(call) if isinstance(err, TimedOut) else _reason(err)
            elif now >= call.deadline:  # a plain call past its limit: abandoned in its daemon thread
                del self.running[future]
                reason = _took_too_long(call)
            else:
                continue
            failed = self._retry_or_fail(call, reason)
            if failed is not None:
                out.append((call.key, failed))
        return out

    def _retry_or_fail(self, call: _Call, reason: str) -> Failed | None:
        if call.tries > call.retries:
            self.failed += 1
            tries = f" (try {call.tries} of {call.tries})" if call.tries > 1 else ""
            return Failed(reason + tries)
        self.retried += 1
        delay = self.backoff_s * 2 ** (call.tries - 1)
        heapq.heappush(self.delayed, (time.monotonic() + delay, next(self.order), call))
        return None
