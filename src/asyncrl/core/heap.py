"""Give the C heap's free pages back to the operating system (glibc's ``malloc_trim``).

A process that runs many short-lived threads (the harness endpoint: a thread per HTTP request and
per episode) frees most of what they allocate, but glibc keeps the freed pages in its arenas, so
the resident size climbs step after step as if memory leaked. ``malloc_trim(0)`` returns those
pages. Elsewhere than glibc (macOS, musl) it is a no-op.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["trim_free_heap"]


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc: nothing to trim with
        return None


def trim_free_heap() -> bool:
    """Return the heap's free pages to the OS; True when glibc did it (False: not available)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
