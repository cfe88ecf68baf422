"""Resident memory of the run's processes, per step, and a warning when it only grows.

An environment that leaks (a list of past boards, a client that keeps every response) takes a
rollout worker from hundreds of MB to GBs in a few steps, and the first sign used to be the OOM
killer. ``memory/trainer_rss_mb`` and ``memory/worker_rss_mb`` (the largest worker's, async) are in
every step's metrics; :class:`GrowthWatch` warns once per process kind when its memory rose at
every one of the last ``window`` steps and by more than ``min_growth`` in all.
"""

from __future__ import annotations

import os
import sys
from collections import deque

__all__ = ["GrowthWatch", "rss_mb"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def rss_mb() -> float:
    """This process's resident memory now, in MiB (Linux: /proc/self/statm; elsewhere the peak,
    ``ru_maxrss``, which only rises)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except (OSError, ValueError, IndexError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 2**20 if sys.platform == "darwin" else peak / 1024


class GrowthWatch:
    """Per metric name, the last ``window + 1`` values; :meth:`observe` returns a warning line the
    first time a name rose at each of its last ``window`` steps by ``min_growth`` (a fraction of
    the first of them) or more in all, else None."""

    def __init__(self, window: int = 8, min_growth: float = 0.25):
        self.window, self.min_growth = window, min_growth
        self.values: dict[str, deque] = {}
        self.warned: set[str] = set()

    def observe(self, step: int, name: str, value_mb: float) -> str | None:
        values = self.values.setdefault(name, deque(maxlen=self.window + 1))
        values.append(value_mb)
        if name in self.warned or len(values) <= self.window:
            return None
        series = list(values)
        rising = all(b > a for a, b in zip(series, series[1:]))
        if not rising or series[-1] < series[0] * (1 + self.min_growth):
            return None
        self.warned.add(name)
        return (f"asyncrl: warning: step {step}: {name} rose at each of the last {self.window} steps, "
                f"{series[0]:.0f} -> {series[-1]:.0f} MiB: a leak in an environment, tool or reward "
                "(a list that keeps every episode)? It is in metrics.jsonl")
