"""SIGTERM / SIGINT during a run: the first asks the loop to stop at the next safe point (after a
finished step; while an async run waits for data, at once), checkpoint and exit; a second one stops
at once. Preemption (``docker stop``, Slurm, Kubernetes) sends SIGTERM and waits a grace period
before SIGKILL; a kill -9 is survived through the periodic checkpoints instead.
"""

from __future__ import annotations

import signal
import threading

from asyncrl.core.errors import AsyncRLError


class StopRequested(Exception):
    """Raised at a safe point after the first SIGTERM / SIGINT."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class Interrupted(AsyncRLError):
    """The run stopped on a signal; ``checkpoint`` is where it can be resumed from (or None)."""

    def __init__(self, signum: int, step: int, checkpoint):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        where = f"checkpoint {checkpoint}" if checkpoint else "no new checkpoint"
        super().__init__(f"stopped by {signal.Signals(signum).name} after step {step} ({where})")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopNow(KeyboardInterrupt):
    """The second SIGTERM / SIGINT: stop at once, with no checkpoint. A KeyboardInterrupt, so every
    ``finally`` and context manager on the way out still runs; ``signum`` gives the exit status
    (128 + signum: 143 for SIGTERM, as for the first)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


class StopRequests:
    """Context manager that owns SIGTERM and SIGINT for the duration of a run (main thread only)."""

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        self.signum: int | None = None
        self.previous: dict[int, object] = {}

    def __enter__(self) -> "StopRequests":
        if threading.current_thread() is threading.main_thread():
            self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        self.previous = {}

    def _handle(self, signum: int, frame) -> None:
        if self.signum is not None:  # the second signal: no more waiting for a safe point
            raise StopNow(signum)
        self.signum = signum

    def check(self) -> None:
        """Raise :class:`StopRequested` if a stop was asked for."""
        if self.signum is not None:
            raise StopRequested(self.signum)
