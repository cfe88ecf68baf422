"""Episodes in flight: the scheduler's loop (docs/agents.md, "The scheduler").

A :class:`Play` holds every episode that has started and not ended, whatever batch it came from:
groups join at any time (:meth:`Play.add`), and :meth:`Play.advance` runs the loop once — decode
the episodes that are ready, or wait for calls to answer — and hands back the groups whose last
member ended. ``EpisodeRunner.run`` plays one batch to its end with it; an async rollout worker
keeps one Play for its whole life and adds each work unit as it arrives, so that episodes stay in
flight across training steps and every group reaches the buffer as soon as it is complete.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from asyncrl.agents.calls import CallPool
from asyncrl.agents.env import row_of
from asyncrl.tasks import Problem

__all__ = ["FinishedGroup", "Play"]

HEARTBEAT_S = 1.0  # while waiting on calls, the chunk hook's cadence (an async worker's heartbeat)


@dataclass
class FinishedGroup:
    """A group whose members all ended: the ``tag`` it was added with, its index among the groups
    added with that tag, and its episodes in order."""

    tag: Any
    index: int
    episodes: list


@dataclass
class _Group:
    tag: Any
    index: int
    episodes: list  # its members, in order
    live: int


class Play:
    """Episodes of ``runner`` (an :class:`~asyncrl.agents.episode.EpisodeRunner`) in flight on
    ``engine``; ``between``: the engine's chunk hook (newer weights, the heartbeat), or None;
    ``check``: called at least every second while waiting on calls, to raise when the run must stop
    (a stop signal need not wait for a hung environment)."""

    def __init__(self, runner, engine, between=None, check=None):
        self.runner, self.engine, self.between, self.check = runner, engine, between, check
        runner.bind(engine)
        sched = runner.scheduling
        self.pool = CallPool(sched.concurrency, sched.backoff_s)
        self.episodes: dict[int, Any] = {}  # episode number -> Episode, while it is in flight
        self.group_of: dict[int, _Group] = {}
        self.ready: list[int] = []
        self.tool_results: dict[int, list] = {}
        self.next_number = 0
        self.stops: tuple[str, ...] | None = None
        self.last_hook = time.monotonic()
        self.clock = {"env_wait_s": 0.0, "decode_s": 0.0, "decodes": 0}
        self.in_flight_max = 0  # the most episodes in flight at once since the last take_clock

    @property
    def live(self) -> int:
        """Episodes in flight."""
        return len(self.episodes)

    def add(self, problems: list[Problem], n: int, tag: Any = None) -> list:
        """Start ``n`` episodes per problem (each its own environment, reset with the problem's row);
        returns them, problems × n in order."""
        started = []
        for index, problem in enumerate(problems):
            group = _Group(tag, index, [], n)
            for _ in range(n):
                number, episode = self.next_number, self.runner.start(problem)
                self.next_number += 1
                self.episodes[number], self.group_of[number] = episode, group
                group.episodes.append(episode)
                started.append(episode)
                if self.stops is None:
                    self.stops = self.runner.stops_of(episode)
                self.runner.begin(self.pool, number, episode, row_of(problem))
        self.in_flight_max = max(self.in_flight_max, len(self.episodes))
        return started

    def advance(self, timeout: float | None = None) -> list[FinishedGroup]:
        """Decode the episodes that are ready, or else wait (up to ``timeout``; None: until a call
        answers) for calls to answer; the groups that ended meanwhile."""
        finished: list[FinishedGroup] = []
        if self.ready and (self.runner.scheduling.schedule == "ready" or not self.pool.pending):
            self._decode(finished)
            return finished
        if not self.pool.pending:
            return finished
        if self.check is not None:
            self.check()
        t0 = time.perf_counter()
        hooked = self.between is not None or self.check is not None  # each needs a call every HEARTBEAT_S
        limits = [t for t in (timeout, HEARTBEAT_S if hooked else None) if t is not None]
        outcomes = self.pool.wait(timeout=min(limits) if limits else None)
        self.clock["env_wait_s"] += time.perf_counter() - t0
        if self.between is not None and time.monotonic() - self.last_hook >= HEARTBEAT_S:
            self._hook()  # the watchdog's heartbeat while environments are slow
        for (number, what, *index), outcome in outcomes:
            episode = self.episodes[number]
            if self.runner.answered(episode, what, index, outcome, self.tool_results.get(number)):
                self.ready.append(number)
            elif episode.end is not None:
                self._ended(number, finished)
        return finished

    def _decode(self, finished: list[FinishedGroup]) -> None:
        numbers = sorted(self.ready)  # in the order they started: the sampler's draws go to the same rows
        self.ready = []
        t0 = time.perf_counter()
        self.runner.decode(self.engine, [self.episodes[k] for k in numbers], self.between, self.stops)
        self.clock["decode_s"] += time.perf_counter() - t0
        self.clock["decodes"] += 1
        for number in numbers:
            episode = self.episodes[number]
            if episode.end is None and self.runner.respond(self.pool, number, episode, self.tool_results):
                self.ready.append(number)  # nothing to ask: its next turn comes in the next engine call
            if episode.end is not None:
                self._ended(number, finished)
        if self.between is not None and self.episodes:
            self._hook()  # newer weights, if any, for the next turns

    def _hook(self) -> None:
        self.between()
        self.last_hook = time.monotonic()

    def _ended(self, number: int, finished: list[FinishedGroup]) -> None:
        episode = self.episodes.pop(number)
        episode.duration_s = time.perf_counter() - episode.started_at
        self.tool_results.pop(number, None)
        self.runner.ended(episode)
        self.runner.failures.record(episode)
        group = self.group_of.pop(number)
        group.live -= 1
        if group.live == 0:
            finished.append(FinishedGroup(group.tag, group.index, group.episodes))

    def take_clock(self) -> dict[str, float]:
        """The scheduler's numbers since the last take (``EpisodeStats.add_scheduler``)."""
        out = {**self.clock, "calls_in_flight_max": self.pool.max_in_flight, "call_retries": self.pool.retried,
               "in_flight_max": self.in_flight_max}
        self.clock = {"env_wait_s": 0.0, "decode_s": 0.0, "decodes": 0}
        self.in_flight_max = len(self.episodes)
        self.pool.max_in_flight = len(self.pool.running)
        self.pool.retried = 0
        return out
