"""A full disk is one line, not a traceback: the file that could not be written, the bytes it
needed (when known) and the bytes free. :class:`DiskFull` is a ConfigError, so the command line
prints it as one line and exits 2, like bad input: the run stops where it is, its last complete
checkpoint intact.

A disk fills in different words: ``OSError(ENOSPC)`` from Python's own files, ``unexpected pos`` or
``iostream error`` from torch's zip writer (``torch.save``), ``StorageFull`` from safetensors.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from asyncrl.core.loader import ConfigError

_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# how torch's and safetensors' writers report a write the disk had no room for
_FULL_WORDS = ("no space left", "unexpected pos", "iostream error", "storagefull", "quota exceeded",
               "failed writing")
_LOW_FREE = 1 << 20  # a writer's vague failure counts as a full disk only with less than this free


class DiskFull(ConfigError):
    """No room left for a file of the run: one line naming it (exit 2)."""

    def __init__(self, message: str):
        ValueError.__init__(self, message)
        self.key = "run.out_dir"


def human_bytes(n: int | float) -> str:
    """``1536`` → ``'1.5 KiB'``: sizes in messages people read."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # not reached


def free_bytes(path: str | Path) -> int | None:
    """Free bytes on the file system of ``path`` (its nearest existing ancestor); None if unknown."""
    probe = Path(path).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free
    except OSError:
        return None


def is_disk_full(err: BaseException, path: str | Path | None = None, needed: int = 0) -> bool:
    """Whether ``err`` is a write that failed for want of space. A library's vague wording
    (``unexpected pos``) counts only when ``path``'s disk has less than ``needed`` (or 1 MiB) free."""
    if isinstance(err, OSError) and err.errno in _FULL_ERRNOS:
        return True
    if not isinstance(err, Exception) or not any(w in str(err).lower() for w in _FULL_WORDS):
        return False
    if "no space left" in str(err).lower():
        return True
    free = free_bytes(path) if path is not None else None
    return free is not None and free < max(needed, _LOW_FREE)


def disk_full(path: str | Path, needed: int | None = None, hint: str = "") -> DiskFull:
    """The one-line error for ``path``: what it needed (when known) and what is free."""
    free = free_bytes(path)
    wanted = f"needs {human_bytes(needed)}, " if needed else ""
    have = f"{human_bytes(free)} free" if free is not None else "free space unknown"
    return DiskFull(f"no space left on device writing {path}: {wanted}{have}{hint}")


@contextmanager
def writing(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn a full disk while writing ``path`` into :class:`DiskFull`; other errors pass."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as err:  # noqa: BLE001 (filtered: only a full disk is converted)
        if not is_disk_full(err, path, needed or 0):
            raise
        raise disk_full(path, needed) from None


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``path`` through ``path.tmp`` and a rename: a reader sees the old file or the new one.
    A full disk: :class:`DiskFull` naming ``path``, and no ``.tmp`` left behind."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with writing(path, len(text.encode())):
            tmp.write_text(text)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.rename(path)
