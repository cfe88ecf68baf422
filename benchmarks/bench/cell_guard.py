"""``python -m benchmarks.bench.cell_guard PARENT_PID -- COMMAND...``: run a cell's command so that it
ends with the runner that started it.

A runner ended by SIGTERM or SIGKILL (a scheduler's time limit, ``kill``, an out-of-memory kill)
never gets to stop its cells; without this they would live on under PID 1, holding cores and
their run directories' locks. On Linux the command is armed with a parent-death signal and then
replaces this process (``execv``: same PID, same resource usage as the cell itself). The signal is
SIGKILL: a cell's own workers carry the same guard, so they go with it. Elsewhere the command just
runs. This file imports nothing of the project: it runs before every cell."""

from __future__ import annotations

import os
import signal
import sys

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def arm(parent_pid: int) -> None:
    """Deliver SIGKILL to this process when the thread that started it ends; exit at once if the
    runner (``parent_pid``) is already gone (it died before the signal was armed)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:
        os._exit(1)


def guarded(command: list[str]) -> list[str]:
    """``command`` (an executable and its arguments) started through this guard, for the runner."""
    return [sys.executable, "-m", __name__, str(os.getpid()), "--", *command]


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m benchmarks.bench.cell_guard PARENT_PID -- COMMAND...")
    arm(int(argv[0]))
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv[1:])
