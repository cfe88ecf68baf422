"""A full disk is one line, not a traceback: the file that could not be written, the bytes it
needed (when known) and the bytes free. :class:`DiskFull` is a ConfigError, so the command line
prints it as one line and exits 2, like bad input: the run stops where it is, its last complete
checkpoint intact.

A disk fills in different words: ``OSError(ENOSPC)`` from Python's own files, ``unexpected pos`` or
``iostream error`` from torch's zip writer (``torch.save``), ``StorageFull`` from safetensors.

A file-size limit (``ulimit -f``, ``RLIMIT_FSIZE``) is the same kind of fault: :class:`FileSizeLimit`,
one line naming the file and the limit. Python ignores ``SIGXFSZ`` (the interpreter sets it to
``SIG_IGN`` at start-up), so a write past the limit fails with ``OSError(EFBIG)`` (safetensors: ``File
too large (os error 27)``; torch's zip writer: its vague ``unexpected pos``, which counts as the
limit when one is set and the disk has room) instead of killing the process.
"""

from __future__ import annotations

import errno
import resource
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


class FileSizeLimit(DiskFull):
    """A file of the run larger than the process may write (``ulimit -f``): one line (exit 2)."""


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


def file_size_limit() -> int | None:
    """The largest file this process may write, in bytes (``ulimit -f``); None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def is_file_size_limit(err: BaseException) -> bool:
    """Whether ``err`` is a write past the file-size limit. A library's vague wording (torch's
    ``unexpected pos``) counts only while a limit is set (callers ask :func:`is_disk_full` first)."""
    if isinstance(err, OSError) and err.errno == errno.EFBIG:
        return True
    text = str(err).lower() if isinstance(err, Exception) else ""
    if "file too large" in text or "os error 27" in text:
        return True
    return file_size_limit() is not None and any(w in text for w in _FULL_WORDS)


def file_too_large(path: str | Path, largest: int | None = None, hint: str = "") -> FileSizeLimit:
    """The one-line error for ``path``: the file-size limit and, when known, the largest file's size."""
    limit = file_size_limit()
    shown = f" ({human_bytes(limit)})" if limit is not None else ""
    size = f"a file of {human_bytes(largest)}" if largest else "a file"
    return FileSizeLimit(f"file size limit reached writing {path}: {size} exceeds ulimit -f{shown}{hint}")


def disk_full(path: str | Path, needed: int | None = None, hint: str = "") -> DiskFull:
    """The one-line error for ``path``: what it needed (when known) and what is free."""
    free = free_bytes(path)
    wanted = f"needs {human_bytes(needed)}, " if needed else ""
    have = f"{human_bytes(free)} free" if free is not None else "free space unknown"
    return DiskFull(f"no space left on device writing {path}: {wanted}{have}{hint}")


@contextmanager
def writing(path: str | Path, needed: int | None = None) -> Iterator[None]:
    """Turn a full disk (or the file-size limit) while writing ``path`` into :class:`DiskFull`
    (:class:`FileSizeLimit`); other errors pass."""
    try:
        yield
    except DiskFull:
        raise
    except Exception as err:  # noqa: BLE001 (filtered: only a full disk is converted)
        if is_disk_full(err, path, needed or 0):
            raise disk_full(path, needed) from None
        if is_file_size_limit(err):
            raise file_too_large(path) from None
        raise


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
