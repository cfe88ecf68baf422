"""One writer per run directory: an exclusive ``flock`` on ``<run dir>/.lock``, held from before the
first file of the run is written until the run ends.

The kernel releases the lock when its holder's file is closed, which includes the holder's death
(SIGKILL, the OOM killer): a dead run's lock never blocks ``--resume``, whatever pid its file still
names. The pid in the file is only what the refusal of a second writer shows.

A second ``asyncrl train`` on the same run directory is refused with one line naming the holder
(``run.name: runs/x is in use by another run (pid 4242)``) and writes nothing: the lock file it
finds was created by the holder.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sys
from pathlib import Path

from asyncrl.core.loader import ConfigError

LOCK_NAME = ".lock"


class RunLock:
    """The lock of one run directory. :meth:`try_existing` takes it before any work when the
    directory already has a lock file (a quick refusal while another run holds it);
    :meth:`acquire` takes it for good, creating the directory and the file, and writes this
    process's pid; :meth:`release` (or this process's end) lets it go."""

    def __init__(self, run_dir: Path):
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_NAME
        self.file = None  # the open lock file while held
        self.unsupported = False  # the file system has no flock (some network mounts): not enforced

    @property
    def held(self) -> bool:
        return self.file is not None

    def try_existing(self) -> None:
        """Take the lock if its file already exists (creating nothing); refused in one line while
        another process holds it."""
        if self.held:
            return
        try:
            file = open(self.path, "r+")  # noqa: SIM115 (held open for the run)
        except (FileNotFoundError, NotADirectoryError):
            return
        self._lock(file)

    def acquire(self) -> None:
        """Take the lock for the run (creating the run directory and its lock file as needed) and
        write this process's pid into it."""
        if not self.held:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self._lock(open(self.path, "a+"))  # noqa: SIM115 ("a+": never truncates a holder's pid)
        if self.file is not None:
            self.file.seek(0)
            self.file.truncate()
            self.file.write(f"{os.getpid()}\n")
            self.file.flush()

    def _lock(self, file) -> None:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                holder = _holder(file)
                file.close()
                raise ConfigError("run.name", f"{self.run_dir} is in use by another run"
                                              f"{f' (pid {holder})' if holder else ''}") from None
            file.close()
            if not self.unsupported:
                self.unsupported = True
                print(f"asyncrl: {self.path}: the file system refuses locks ({err.strerror}); a second run "
                      f"on this run.name would not be refused", file=sys.stderr)
            return
        self.file = file

    def release(self) -> None:
        """Let the lock go (idempotent). The file stays: removing it would let a third process lock
        a new file while a second still holds the old one."""
        if self.file is not None:
            self.file.close()  # closing the last descriptor releases the flock
            self.file = None


def _holder(file) -> str:
    """The pid written by the process that holds ``file``'s lock ("" if none yet)."""
    try:
        file.seek(0)
        text = file.read(32).strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""
