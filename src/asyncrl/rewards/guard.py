"""One call of a user's code (a reward function, an environment's step, the import of a reward or
plugin module), bounded in time and kept from ending the process.

* **Time**: past ``reward.timeout_s`` the call is stopped by :class:`TimedOut`, raised in the
  calling thread by a signal (``SIGUSR2``) that a timer thread sends it. Not ``SIGALRM``: reward
  code that uses ``signal.alarm`` itself (math-verify's own timeouts do) would cancel ours. A
  ``BaseException``, so that a function's own ``except Exception`` does not swallow it. Signals
  reach only the main thread: elsewhere (a Python API call from a thread) the call is not bounded.
  A function stuck in C code that never returns to Python is not stopped either; in an async run
  the rollout worker's watchdog (``async.worker_timeout_s``) ends it.
* **Exits**: a function that calls ``sys.exit(n)`` or raises ``KeyboardInterrupt`` would end the
  rollout worker (restarted, and failing again) or the trainer (exit status n, or "interrupted").
  :class:`Exited` names it instead. A real SIGINT / SIGTERM that lands during the call (the
  trainer's second-signal stop raises ``KeyboardInterrupt``) is told apart and passes through.
* **Imports**: :func:`import_guarded` turns every way a user's module can fail while being imported
  (``sys.exit`` and ``KeyboardInterrupt`` included) into one ValueError line naming it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import TypeVar

__all__ = ["Exited", "TimedOut", "call_guarded", "import_guarded"]

T = TypeVar("T")

_DEADLINE_SIGNAL = getattr(signal, "SIGUSR2", None)


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
            detail = (str(err).strip().splitlines() or [""])[0][:200]
            what = f"raised {type(err).__name__}" + (f": {detail}" if detail else "")
            self.deed = f"raised {type(err).__name__}"
        super().__init__(what)


class _Call:
    """The state of the guarded call in progress (main thread only; calls do not nest)."""

    current: "_Call | None" = None

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.fired = False  # the timer sent its signal
        self.signalled = False  # a real SIGINT / SIGTERM arrived during the call
        self.timer: threading.Timer | None = None
        self.relayed: dict[int, Callable] = {}

    def __enter__(self) -> "_Call":
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(signum)
            if callable(handler):  # a Python handler: it may raise KeyboardInterrupt in the call
                self.relayed[signum] = handler
                signal.signal(signum, self._relay)
        if self.seconds and _DEADLINE_SIGNAL is not None:
            if signal.getsignal(_DEADLINE_SIGNAL) is not _on_deadline:
                signal.signal(_DEADLINE_SIGNAL, _on_deadline)  # left installed: a late signal is a no-op
            _Call.current = self
            self.timer = threading.Timer(self.seconds, self._fire, args=(threading.get_ident(),))
            self.timer.daemon = True
            self.timer.start()
        return self

    def _relay(self, signum: int, frame) -> None:
        self.signalled = True
        self.relayed[signum](signum, frame)

    def _fire(self, thread_id: int) -> None:
        self.fired = True
        signal.pthread_kill(thread_id, _DEADLINE_SIGNAL)

    def __exit__(self, exc_type, exc, tb) -> None:
        timed_out = False
        while True:  # the deadline's handler may raise once more while this cleans up: then again
            try:
                self._close()
                break
            except TimedOut:
                timed_out = True
        if (self.fired or timed_out) and exc_type is None:  # it took too long, even if it then returned
            raise TimedOut()

    def _close(self) -> None:
        _Call.current = None  # first: from here on the deadline's handler raises nothing
        if self.timer is not None:
            self.timer.cancel()
            self.timer.join()
        for signum, handler in self.relayed.items():
            signal.signal(signum, handler)


def _on_deadline(signum: int, frame) -> None:
    call = _Call.current
    if call is not None and call.fired:
        raise TimedOut()


def call_guarded(fn: Callable[[], object], timeout_s: float | None) -> object:
    """``fn()``, stopped by :class:`TimedOut` after ``timeout_s`` seconds (None: no bound); a
    BaseException of its own (SystemExit, KeyboardInterrupt) comes out as :class:`Exited`."""
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


def import_guarded(load: Callable[[], T], shown: str, missing_hint: str = "") -> T:
    """``load()``, the import of a user's module (a reward module, a ``run.plugins`` module), each
    way it can fail a ValueError ``cannot import 'shown': ...`` (one line): an exception's first line
    (``missing_hint`` added when no module of that name exists), or the module calling ``sys.exit``
    or raising ``KeyboardInterrupt`` while being imported, which would otherwise end the command with
    the module's status, having done nothing. A real Ctrl-C during the import still stops it."""
    try:
        return call_guarded(load, None)  # type: ignore[return-value]
    except Exited as err:
        raise ValueError(f"cannot import {shown!r}: the module {err.deed} while being imported") from None
    except Exception as err:  # a user's module may fail to import with anything
        reason = (str(err).strip().splitlines() or [""])[0][:200]
        hint = missing_hint if isinstance(err, ModuleNotFoundError) else ""
        raise ValueError(f"cannot import {shown!r}: {type(err).__name__}: {reason}{hint}") from None
