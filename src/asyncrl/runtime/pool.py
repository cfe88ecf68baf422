"""A pool of rollout worker processes on one machine: start once, hand out work units, collect
results, detect dead workers and restart them (their in-flight units are reported as lost).

A watchdog restarts stuck workers the same way: one that holds work and has sent nothing (a
result, or the heartbeat it sends between decode chunks) for ``async.worker_timeout_s`` is killed
with SIGKILL (which also ends a stopped process) and restarted; a restarted one that does not report
ready within ``async.worker_start_timeout_s`` likewise. Shutting down never waits on a worker for
more than a few seconds: it asks, then SIGTERM, then SIGKILL.

On CUDA the workers start one at a time (:func:`asyncrl.runtime.worker.starts_alone`): each next
one when the one before it reported ready. Work handed out meanwhile waits in its queue."""

from __future__ import annotations

import queue
import sys
import time
from dataclasses import replace

from asyncrl.core.errors import AsyncRLError, from_payload
from asyncrl.core.loader import ConfigError
from asyncrl.runtime.worker import WorkerSpec, WorkUnit, starts_alone, worker_main
from asyncrl.runtime.worker_entry import start_guarded
from asyncrl.types import batch_from_numpy


class WorkerError(AsyncRLError, RuntimeError):
    """Rollout workers that cannot start, or keep dying (exit 1 on the command line)."""


def reseeded(spec: WorkerSpec, restarts: int) -> WorkerSpec:
    """The spec a worker (re)starts with after ``restarts`` restarts of its pool: a restarted
    worker must not replay its predecessor's random stream."""
    return replace(spec, seed=spec.seed + 1_000_003 * restarts) if restarts else spec


def report_restart(worker_id: int, what: str, restarts: int, n_lost: int, n_workers: int) -> None:
    """One line per restart; :class:`WorkerError` once the pool has restarted more than ten times
    per worker (a worker that dies at every start would otherwise loop for ever)."""
    print(f"asyncrl: rollout worker {worker_id} {what}; restarting it (restart {restarts}); "
          f"{n_lost} work unit(s) lost", file=sys.stderr, flush=True)
    if restarts > 10 * n_workers:
        raise WorkerError("rollout workers keep dying; giving up (see the errors above)")


def take_delivered(units: dict[int, WorkUnit], payload: dict) -> bool:
    """Take a result off ``units`` (one worker's units in flight, by unit id): the whole unit, or
    the groups it names (``delivered``: a worker that sends each group as it ends), the rest staying
    in flight, where a checkpoint re-issues them and nothing else (nothing trained twice, nothing
    lost). False for a unit no longer in flight (its worker was declared dead: its place in the
    buffer was already given back, so the result must be dropped). Both backends' pools call it."""
    unit = units.get(payload["unit_id"])
    if unit is None:
        return False
    sent = set(payload.get("delivered", unit.group_ids))
    left = [(i, g) for i, g in zip(unit.problem_indices, unit.group_ids) if g not in sent]
    if left:
        units[unit.unit_id] = replace(unit, problem_indices=[i for i, _ in left], group_ids=[g for _, g in left])
    else:
        del units[unit.unit_id]
    return True


class InputError(ConfigError):
    """A worker's ConfigError whose own class this process cannot find, re-raised with its message
    (exit 2); any other is re-raised as its own class (asyncrl.core.errors.from_payload)."""

    def __init__(self, message: str):
        ValueError.__init__(self, message)
        self.key = ""


def _last_line(text: str) -> str:
    lines = [line for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "unknown error"


class WorkerPool:
    def __init__(self, ctx, specs: list[WorkerSpec], channel, start_timeout_s: float = 300.0):
        self.ctx = ctx
        # the watchdog's bound (async.worker_timeout_s), from the workers' own configuration
        self.worker_timeout_s = float(specs[0].config["async"]["worker_timeout_s"]) if specs else 600.0
        self.heard: dict[int, float] = {}  # worker id → when it last sent something (or got work idle)
        self.started: dict[int, float] = {}  # worker id → when its current process started
        self.ready: set[int] = set()  # workers whose current process reported ready
        self.causes: dict[int, str] = {}  # why the watchdog killed a worker, for the restart line
        self.received: list[tuple] = []  # messages read by the watchdog, handed out by the next poll
        self.specs = {s.worker_id: s for s in specs}
        self.channel = channel
        self.result_q = ctx.Queue()
        self.stop = ctx.Event()
        self.processes: dict[int, object] = {}
        self.inflight: dict[int, dict[int, WorkUnit]] = {s.worker_id: {} for s in specs}
        self.restarts = 0
        self.start_timeout_s = start_timeout_s
        self.work_qs = {worker_id: ctx.Queue() for worker_id in self.specs}
        # started later, each when the one before it is ready (wait_ready)
        self.unstarted = [w for w in self.specs if starts_alone(self.specs[w])][1:]
        for worker_id in self.specs:
            if worker_id not in self.unstarted:
                self._start(worker_id)

    def _start(self, worker_id: int) -> None:
        """Start the worker's process; a restarted one gets a fresh queue (its units were lost)."""
        work_q = self.work_qs[worker_id] if worker_id not in self.processes else self.ctx.Queue()
        spec = reseeded(self.specs[worker_id], self.restarts)
        proc = start_guarded(self.ctx, worker_main, (spec, self.channel, work_q, self.result_q, self.stop),
                             name=f"asyncrl-rollout-{worker_id}")
        self.processes[worker_id] = proc
        self.work_qs[worker_id] = work_q
        self.started[worker_id] = self.heard[worker_id] = time.monotonic()
        self.ready.discard(worker_id)

    def wait_ready(self) -> list[tuple]:
        """Block until every worker reported ready (starting the ones that wait for the one before
        them); returns any results that arrived meanwhile."""
        pending, early = set(self.specs), []
        deadline = time.monotonic() + self.start_timeout_s
        while pending:
            if self.unstarted and not pending & set(self.processes):  # every started worker is ready
                self._start(self.unstarted.pop(0))
                deadline = time.monotonic() + self.start_timeout_s  # the timeout is per worker
            if time.monotonic() > deadline:
                raise WorkerError(f"rollout workers {sorted(pending)} did not start in {self.start_timeout_s:.0f}s")
            for msg in self.poll(timeout=0.5):
                if msg[0] == "error" and msg[1] in pending:  # a start-up failure: say it now, do not wait
                    raise WorkerError(f"rollout worker {msg[1]} failed to start: {_last_line(msg[2])}")
                early.append(msg)
            pending -= {m[1] for m in early if m[0] == "ready"}
            early = [m for m in early if m[0] != "ready"]
            for worker_id in pending & set(self.processes):
                if self.processes[worker_id].exitcode is not None:
                    raise WorkerError(f"rollout worker {worker_id} exited during start-up "
                                      f"(exit code {self.processes[worker_id].exitcode})")
        return early

    def submit(self, unit: WorkUnit) -> int:
        worker_id = min(self.inflight, key=lambda w: (len(self.inflight[w]), w))
        if not self.inflight[worker_id]:  # idle until now: the watchdog's clock starts with this unit
            self.heard[worker_id] = time.monotonic()
        self.inflight[worker_id][unit.unit_id] = unit
        self.work_qs[worker_id].put(unit)
        return worker_id

    def inflight_units(self) -> list[WorkUnit]:
        """Units handed out and not yet returned, oldest first (a checkpoint re-issues them)."""
        return sorted((u for units in self.inflight.values() for u in units.values()), key=lambda u: u.unit_id)

    @property
    def n_inflight(self) -> int:
        return sum(len(units) for units in self.inflight.values())

    def poll(self, timeout: float = 0.0) -> list[tuple]:
        """Messages available now (waits up to ``timeout`` for the first). Errors raise."""
        messages, self.received = self.received + self._receive(0.0 if self.received else timeout), []
        return messages

    def _receive(self, timeout: float) -> list[tuple]:
        """Read the result queue: note who was heard from, convert results, raise a fatal error.
        A result of a unit no longer in flight (its worker was declared dead) is dropped: its
        place in the buffer was already given back."""
        messages = []
        try:
            messages.append(self.result_q.get(timeout=timeout) if timeout > 0 else self.result_q.get_nowait())
            while True:
                messages.append(self.result_q.get_nowait())
        except queue.Empty:
            pass
        now, kept = time.monotonic(), []
        for kind, worker_id, payload in messages:
            self.heard[worker_id] = now
            if kind == "ready":
                self.ready.add(worker_id)
            elif kind == "result":
                if not take_delivered(self.inflight[worker_id], payload):
                    continue
                payload["batch"] = batch_from_numpy(payload["batch"])
            elif kind == "fatal":  # the worker hit bad input: the run stops with its one line, as its class
                raise from_payload(payload, InputError)
            elif kind == "error":
                print(f"asyncrl: rollout worker {worker_id} failed:\n{payload}", file=sys.stderr, flush=True)
            if kind != "alive":
                kept.append((kind, worker_id, payload))
        return kept

    def kill_stuck(self) -> None:
        """The watchdog: SIGKILL every worker that holds work and has been silent too long (or,
        restarted, has not become ready in time); :meth:`restart_dead` then restarts it."""
        self.received += self._receive(0.0)  # what arrived while the trainer was busy counts as heard
        now = time.monotonic()
        for worker_id, proc in self.processes.items():
            if not self.inflight[worker_id] or not proc.is_alive():
                continue
            if worker_id in self.ready:
                silent, limit = now - self.heard[worker_id], self.worker_timeout_s
                cause = f"no result for {silent:.0f} s (async.worker_timeout_s={limit:g})"
            else:
                silent, limit = now - self.started[worker_id], self.start_timeout_s
                cause = f"not ready {silent:.0f} s after its start (async.worker_start_timeout_s={limit:g})"
            if silent > limit:
                self.causes[worker_id] = cause
                proc.kill()
                proc.join(timeout=5)

    def restart_dead(self) -> list[WorkUnit]:
        """Restart workers that died or that the watchdog killed; returns the units they will never finish."""
        self.kill_stuck()
        lost = []
        for worker_id, proc in list(self.processes.items()):
            if proc.is_alive():
                continue
            units = list(self.inflight[worker_id].values())
            lost += units
            self.inflight[worker_id].clear()
            self.restarts += 1
            cause = self.causes.pop(worker_id, None)
            what = f"killed: {cause}" if cause else f"died (exit code {proc.exitcode})"
            report_restart(worker_id, what, self.restarts, len(units), len(self.specs))
            lost_hook = getattr(getattr(self, "channel", None), "worker_lost", None)
            if lost_hook is not None:  # a channel with a connection per worker ends this one's
                lost_hook(proc.pid)
            self._start(worker_id)
        return lost

    def shutdown(self, grace_s: float = 2.0) -> None:
        """Stop every worker within about ``grace_s``: ask (a worker between units leaves in
        0.2 s), then SIGKILL (a stopped or stuck process ignores the ask, and multiprocessing would
        wait for it without end when the trainer exits; workers ignore SIGTERM, see worker_entry)."""
        self.stop.set()
        procs = list(self.processes.values())
        for ask in (None, "kill"):
            if ask is not None:
                for proc in procs:
                    if proc.is_alive():
                        getattr(proc, ask)()
            deadline = time.monotonic() + (grace_s if ask != "kill" else 10.0)
            for proc in procs:
                proc.join(timeout=max(0.0, deadline - time.monotonic()))
            procs = [proc for proc in procs if proc.is_alive()]
            if not procs:
                return
