"""Calls of a user's code (a reward function, an environment's ``reset``/``step``, a tool, a harness,
the import of a reward or plugin module): bounded in time, kept from ending the process, and
reported in one line.

* **One line**: :func:`first_line` is how every error of user code is quoted in a message.
* **Time** (:func:`call_guarded`): past ``timeout_s`` the call is *stopped*, not abandoned:
  :class:`TimedOut` is raised inside it, in the thread that runs it. Two ways existed: raising in
  the calling thread, and running the call in a thread of its own that the caller stops waiting
  for. Stopping is kept because an abandoned call goes on running: a reward function in a loop
  would hold the GIL beside the trainer for the rest of the run, and a tool would go on writing
  the episode's state. In the main thread the exception is raised by a signal (``SIGUSR2``, sent by
  a timer thread), which also interrupts a blocking ``time.sleep`` or socket read; not ``SIGALRM``,
  which reward code may use itself (math-verify's own timeouts do; those work only in the main
  thread, so reward functions run there, not in a thread of their own). In any other thread it is
  an asynchronous exception, raised at the call's next Python instruction. :class:`TimedOut` is a
  ``BaseException``, so that a function's own ``except Exception`` does not swallow it. A call
  stuck in C code never reaches a next instruction: callers that must not wait past the limit
  whatever happens (the episode scheduler, the tool box) run it with :func:`in_thread` and stop
  waiting at the limit; in an async run the rollout worker's watchdog (``async.worker_timeout_s``)
  ends the rest. A coroutine is given the same limit by cancellation (:func:`await_bounded`).
* **Exits**: a call that runs ``sys.exit(n)`` or raises ``KeyboardInterrupt`` would end the rollout
  worker or the trainer. :class:`Exited` names it instead. A real SIGINT / SIGTERM that lands
  during the call (the trainer's second-signal stop raises ``KeyboardInterrupt``) passes through.
* **Imports**: :func:`import_guarded` turns every way a user's module can fail while being imported
  into one ValueError line naming it.
* **Numbers**: :func:`finite_number` is what a value user code returned counts as (the tensors a
  run loads are checked by :mod:`asyncrl.core.finite`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import heapq
import inspect
import math
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Exited", "TimedOut", "await_bounded", "bounded_coroutine", "call_guarded", "finite_number", "first_line",
           "import_guarded", "in_thread"]

T = TypeVar("T")

_DEADLINE_SIGNAL = getattr(signal, "SIGUSR2", None)


def first_line(err: BaseException | str, limit: int = 200) -> str:
    """How an error is quoted in one line: ``"KeyError: 'board'"``, an exception's type and the first
    non-empty line of its message cut to ``limit`` characters, or its type alone when the message is
    empty; for a string, its first non-empty line. An exception whose ``__str__`` fails is its type."""
    try:
        text = err if isinstance(err, str) else str(err)
    except Exception:  # noqa: BLE001 - a broken __str__ of user code must not hide the error itself
        text = ""
    line = (text.strip().splitlines() or [""])[0][:limit]
    if isinstance(err, str):
        return line
    return f"{type(err).__name__}: {line}" if line else type(err).__name__


def finite_number(value: object) -> float | None:
    """``value`` as a finite float, or None (bools count as numbers: a check that returns True)."""
    if isinstance(value, (int, float)) or hasattr(value, "__float__"):
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError, OverflowError):
            return None
        return number if math.isfinite(number) else None
    return None


class TimedOut(BaseException):
    """The call ran past its time limit."""


class Exited(Exception):
    """The call raised SystemExit, KeyboardInterrupt or another BaseException of its own.
    ``str()``: ``exited (SystemExit 3)`` or ``raised KeyboardInterrupt``."""

    def __init__(self, err: BaseException):
        if isinstance(err, SystemExit):
            what = "exited (SystemExit)" if err.code is None else f"exited (SystemExit {err.code!r})"
            # what it did, in the words its code used: ``called sys.exit(0)``
            self.deed = "called sys.exit()" if err.code is None else f"called sys.exit({err.code!r})"
        else:
            what = "raised " + first_line(err)
            self.deed = f"raised {type(err).__name__}"
        self.error = err  # what the call raised, for a caller that reports it in its own words
        super().__init__(what)


def _raise_in(thread_id: int, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in thread ``thread_id`` at its next Python instruction (None: take back one
    not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc else None)


class _Deadlines:
    """One daemon thread that fires the deadlines of every guarded call in the process: a call then
    costs a heap push, not a timer thread of its own, whose start would delay each short call."""

    def __init__(self):
        self.cond = threading.Condition()
        self.heap: list[tuple[float, int, "_Call"]] = []
        self.seq = 0
        self.thread: threading.Thread | None = None
        self.pid = 0

    def add(self, seconds: float, call: "_Call") -> None:
        with self.cond:
            self.seq += 1
            heapq.heappush(self.heap, (time.monotonic() + seconds, self.seq, call))
            if self.thread is None or self.pid != os.getpid():  # none yet, or not in this forked child
                self.pid = os.getpid()
                self.thread = threading.Thread(target=self._run, daemon=True, name="asyncrl-deadlines")
                self.thread.start()
            self.cond.notify()

    def _run(self) -> None:
        while True:
            with self.cond:
                while self.heap and self.heap[0][2].ended:  # ended calls are dropped as they surface
                    heapq.heappop(self.heap)
                if not self.heap:
                    self.cond.wait()
                    continue
                left = self.heap[0][0] - time.monotonic()
                if left > 0:
                    self.cond.wait(left)
                    continue
                call = heapq.heappop(self.heap)[2]
            call._fire()


_DEADLINES = _Deadlines()


class _Call:
    """The state of one guarded call (calls do not nest within one thread)."""

    current: "_Call | None" = None  # the main thread's call, which the deadline's signal handler reads

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.main = threading.current_thread() is threading.main_thread()
        self.thread_id = threading.get_ident()
        self.fired = False  # the deadline passed while the call ran
        self.ended = False
        self.lock = threading.Lock()
        self.signalled = False  # a real SIGINT / SIGTERM arrived during the call
        self.relayed: dict[int, Callable] = {}

    def __enter__(self) -> "_Call":
        if self.main:
            for signum in (signal.SIGINT, signal.SIGTERM):
                handler = signal.getsignal(signum)
                if callable(handler):  # a Python handler: it may raise KeyboardInterrupt in the call
                    self.relayed[signum] = handler
                    signal.signal(signum, self._relay)
        if not self.seconds or (self.main and _DEADLINE_SIGNAL is None):
            return self
        if self.main:
            if signal.getsignal(_DEADLINE_SIGNAL) is not _on_deadline:
                signal.signal(_DEADLINE_SIGNAL, _on_deadline)  # left installed: a late signal is a no-op
            _Call.current = self
        _DEADLINES.add(self.seconds, self)
        return self

    def _relay(self, signum: int, frame) -> None:
        self.signalled = True
        self.relayed[signum](signum, frame)

    def _fire(self) -> None:
        with self.lock:
            if self.ended:
                return
            self.fired = True
            if self.main:
                signal.pthread_kill(self.thread_id, _DEADLINE_SIGNAL)
            else:
                _raise_in(self.thread_id, TimedOut)

    def __exit__(self, exc_type, exc, tb) -> None:
        timed_out = False
        while True:  # the deadline may raise once more while this cleans up: then again
            try:
                self._close()
                break
            except TimedOut:
                timed_out = True
        if (self.fired or timed_out) and exc_type is None:  # it took too long, even if it then returned
            raise TimedOut()

    def _close(self) -> None:
        with self.lock:
            self.ended = True  # first: from here on the deadline raises nothing
            _Call.current = None if self.main else _Call.current
            if self.fired and not self.main:
                _raise_in(self.thread_id, None)  # one still pending is taken back
        for signum, handler in self.relayed.items():
            signal.signal(signum, handler)
        self.relayed = {}


def _on_deadline(signum: int, frame) -> None:
    call = _Call.current
    if call is not None and call.fired and not call.ended:
        raise TimedOut()


def call_guarded(fn: Callable[[], T], timeout_s: float | None) -> T:
    """``fn()`` in this thread, stopped by :class:`TimedOut` after ``timeout_s`` seconds (None or 0:
    no bound); a BaseException of its own (SystemExit, KeyboardInterrupt) comes out as :class:`Exited`."""
    call = _Call(timeout_s)
    try:
        with call:
            return fn()
    except (TimedOut, Exception):
        raise
    except BaseException as err:
        if call.signalled:  # a stop signal of the process, not the function's doing
            raise
        raise Exited(err) from None


async def await_bounded(awaitable, timeout_s: float | None):
    """``await awaitable``, cancelled after ``timeout_s`` (:class:`TimedOut`): a coroutine is stopped
    where it awaits, the form a limit takes for code that cooperates."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout_s)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise TimedOut()
    return task.result()


async def _exits_named(fn: Callable, args: tuple):
    """``await fn(*args)`` with its SystemExit / KeyboardInterrupt as :class:`Exited`: asyncio lets
    those two out of a task into the loop's thread, which would end a loop other calls share."""
    try:
        return await fn(*args)
    except (Exception, asyncio.CancelledError):
        raise
    except BaseException as err:  # noqa: BLE001
        raise Exited(err) from None


def bounded_coroutine(fn: Callable, args: tuple, timeout_s: float | None):
    """The coroutine that awaits ``fn(*args)`` within ``timeout_s``, its exits named."""
    return await_bounded(_exits_named(fn, args), timeout_s)


def _run_in_thread(fn: Callable, args: tuple, timeout_s: float | None, loop, future: concurrent.futures.Future):
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        value = call_guarded(lambda: fn(*args), timeout_s)
        if inspect.isawaitable(value):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            coro = bounded_coroutine(lambda: value, (), left)
            # on the given loop (one other calls share), else a fresh one in this thread
            value = asyncio.run_coroutine_threadsafe(coro, loop()).result() if loop else asyncio.run(coro)
        future.set_result(value)
    except (TimedOut, Exception) as err:
        future.set_exception(err)
    except BaseException as err:  # noqa: BLE001 - what the call did is its outcome, never this thread's end
        future.set_exception(Exited(err))


def in_thread(fn: Callable, args: tuple = (), timeout_s: float | None = None, *, loop=None,
              name: str = "asyncrl-user-call") -> concurrent.futures.Future:
    """``fn(*args)`` guarded (:func:`call_guarded`) in a daemon thread of its own; a coroutine it
    returns is awaited within what is left of ``timeout_s``, on the event loop ``loop()`` returns when
    given (else on a fresh one in the thread: a coroutine that blocks its loop blocks no other call). The future holds
    the value or the exception (:class:`TimedOut`, :class:`Exited` included); the caller bounds its
    own wait, since a call stuck in C code is never stopped. A daemon thread per call, not an
    executor: an executor's workers are joined at exit, so one stuck call would keep the process
    alive, and stuck calls would use up a pool later calls wait on."""
    future: concurrent.futures.Future = concurrent.futures.Future()
    threading.Thread(target=_run_in_thread, args=(fn, args, timeout_s, loop, future), daemon=True, name=name).start()
    return future


def import_guarded(load: Callable[[], T], shown: str, missing_hint: str = "") -> T:
    """``load()``, the import of a user's module (a reward module, a ``run.plugins`` module), each
    way it can fail a ValueError ``cannot import 'shown': ...`` (one line): an exception's first line
    (``missing_hint`` added when no module of that name exists), or the module calling ``sys.exit``
    or raising ``KeyboardInterrupt`` while being imported, which would otherwise end the command with
    the module's status, having done nothing. A real Ctrl-C during the import still stops it."""
    try:
        return call_guarded(load, None)
    except Exited as err:
        raise ValueError(f"cannot import {shown!r}: the module {err.deed} while being imported") from None
    except Exception as err:  # a user's module may fail to import with anything
        hint = missing_hint if isinstance(err, ModuleNotFoundError) else ""
        raise ValueError(f"cannot import {shown!r}: {first_line(err)}{hint}") from None

