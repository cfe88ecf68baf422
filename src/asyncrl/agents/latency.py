"""An environment with a remote environment's latency (``env.name=latency``): any registered
environment (``env.kwargs.inner``, default ``guess``) whose ``reset`` and ``step`` answer after a
delay drawn from a lognormal distribution, the usual model of service times: most answers come
near the median, a few take many times longer (σ = 1: the 90th percentile is 3.6 × the median,
the 99th 10 ×).

    env.name=latency env.kwargs={inner: guess, median_s: 0.5, sigma: 1.0}

The delays of an episode are drawn from a generator seeded by (``seed``, the row's uid, how many
episodes of that row this process started before it): the same episode meets the same delays in
every mode and every run that plays the rows in the same order, so sync and async runs wait on identical environments. The wait is an
``asyncio.sleep``: a thousand episodes in flight cost no threads. The inner environment's other
keyword arguments go to ``inner_kwargs``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import math
import random
import threading

from asyncrl.core.import_path import resolve

__all__ = ["Latency"]


class Latency:
    """``inner`` (a name of :data:`asyncrl.agents.ENVIRONMENTS`) answering after lognormal delays."""

    _members: dict[str, itertools.count] = {}  # uid -> counter: the member index of each new episode
    _lock = threading.Lock()

    def __init__(self, inner: str = "guess", median_s: float = 0.5, sigma: float = 1.0, seed: int = 0,
                 inner_kwargs: dict | None = None):
        from asyncrl.agents import ENVIRONMENTS

        why = "latency cannot delay itself" if inner == "latency" else ENVIRONMENTS.why_not(inner)
        if why is not None:
            raise ValueError(f"inner: {why}")
        if median_s < 0 or sigma < 0:
            raise ValueError("median_s and sigma: must be >= 0")
        self.inner = resolve(ENVIRONMENTS[inner])(**(inner_kwargs or {}))
        self.median_s, self.sigma, self.seed = median_s, sigma, seed
        self.stop = tuple(getattr(self.inner, "stop", ()))
        self.role = getattr(self.inner, "role", "user")
        self.rng = random.Random(0)

    def delay(self) -> float:
        """The next call's delay in seconds (0 when the median is 0)."""
        if self.median_s == 0:
            return 0.0
        return self.median_s * math.exp(self.sigma * self.rng.gauss(0.0, 1.0))

    async def reset(self, row: dict):
        uid = str(row.get("uid", ""))
        with Latency._lock:  # the members of a group reset in order of their construction's submission
            member = next(Latency._members.setdefault(uid, itertools.count()))
        digest = hashlib.sha256(f"{self.seed}/{uid}/{member}".encode()).digest()
        self.rng = random.Random(int.from_bytes(digest[:8], "big"))
        await asyncio.sleep(self.delay())
        return self.inner.reset(row)

    async def step(self, action: str):
        await asyncio.sleep(self.delay())
        return self.inner.step(action)
