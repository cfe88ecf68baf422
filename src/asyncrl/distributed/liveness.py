"""The trainer ranks' heartbeats, and the waits they bound (``trainer.fsdp.timeout_s``).

Two kinds of wait join the ranks of a torchrun job:
- a collective (an FSDP all-gather, a command's broadcast): every rank is in it at about the same
  time, so the process group's timeout, ``timeout_s``, bounds it (asyncrl.distributed.world);
- a wait outside any collective, which may be long and still healthy: the other ranks wait for rank
  0's next command while it generates, evaluates or writes a checkpoint, and rank 0 waits while they
  load the model. These go through torchrun's store (a key the awaited rank sets) and are bounded by
  the awaited rank's heartbeat, not by their length.

A heartbeat is a thread that adds 1 to its rank's count in the store every ``BEAT_S`` seconds. It
goes on while the rank works, however long, and stops with the process: SIGSTOP, a frozen node,
death. Rank 0 reads every rank's count, the others rank 0's; a count that has not moved for
``timeout_s`` is a rank that stopped answering. The store is torchrun's agent's (``MASTER_ADDR``,
``MASTER_PORT``), so it still answers while a rank is stopped.

A rank that ends (an error, the end of the run) marks it in the store, so a rank waiting for it
ends at once and quietly: the rank that ended says why. One that is killed cannot: torchrun's agent
then sends the others SIGTERM, which the ranks other than 0 leave to rank 0 (it checkpoints with
them), but after which they give rank 0's heartbeat only ``SIGNALLED_S`` seconds, not ``timeout_s``.

A fault that several ranks find (each survivor's collective fails) is said once, by the first rank to
claim it in the store (:meth:`Peers.fault`), with where the run continues (rank 0 keeps it in the
store: :meth:`Peers.note_run`). Under ``asyncrl train --nproc-per-node`` a lost rank is the
launcher's to name (asyncrl.distributed.launch).

Once a stop signal came, or before a stop's checkpoint, rank 0 starts no collective before a roll
call (:meth:`Peers.roll_call`): each other rank answers it from its wait for the next command, or
shows a heartbeat, within ``SIGNALLED_S``. A rank that does neither is lost (killed, stopped), and a
collective would wait for it until ``timeout_s``, on NCCL until torchrun's agent SIGKILLs the
waiting rank; rank 0 ends instead, in one line, with no checkpoint (every rank writes its shard).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from datetime import timedelta

import torch

from asyncrl.distributed.launch import LOST, RESUME, SAID_ENV, note
from asyncrl.distributed.world import (RankLost, RankTimeout, World, hold_off_sigterm, lost_message, lost_rank,
                                       timed_out)

BEAT_S = 2.0  # seconds between two beats (at most a quarter of timeout_s)
POLL_S = 0.05  # the longest sleep between two looks at an awaited key
SIGNALLED_S = 6.0  # after a stop signal, a silence this long ends a wait (3 beats)


def job_store(token: str, timeout_s: float) -> torch.distributed.Store:
    """A connection of this rank to torchrun's store, its keys under ``asyncrl/<token>/`` (one token per
    run of a job, so that a second ``train`` in the same job starts afresh)."""
    if "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ:
        store = torch.distributed.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                           is_master=False, timeout=timedelta(seconds=timeout_s))
    else:  # a process group the caller set up another way (the API): the store it was set up with
        store = torch.distributed.distributed_c10d._get_default_store().clone()
    return torch.distributed.PrefixStore(f"asyncrl/{token}/", store)


class Peers:
    """This rank's view of the others: its heartbeat, theirs, and the waits they bound."""

    def __init__(self, world: World, timeout_s: float, token: str):
        self.world, self.timeout_s = world, timeout_s
        self.store = job_store(token, timeout_s)
        self.period = min(BEAT_S, timeout_s / 4)
        self.watched = list(range(world.size)) if world.leader else [0]
        self.moved = {rank: time.monotonic() for rank in self.watched}  # when each count last changed
        self._counts: dict[int, bytes] = {}
        self._sent = 0  # rank 0's commands announced (rank 0), or awaited (the others)
        self.signalled = False  # a stop signal came (to a rank other than 0: see stop_signalled)
        self.resume = ""  # where the run continues after a fault (rank 0: note_run)
        self._stop_requests = None  # rank 0's StopRequests (note_run)
        self._rolls = 0  # roll calls made (rank 0) or answered (the others)
        self._stop = threading.Event()
        beats = job_store(token, timeout_s)  # the thread's own connection
        for rank in self.watched:
            beats.add(_beat_key(rank), 0)  # every watched count exists before the first read
        self._thread = threading.Thread(target=self._beat, args=(beats,), name="asyncrl-heartbeat", daemon=True)
        self._thread.start()

    def _beat(self, store: torch.distributed.Store) -> None:
        keys = [_beat_key(rank) for rank in self.watched]
        while True:
            try:
                store.add(_beat_key(self.world.rank), 1)
                counts = store.multi_get(keys)
            except Exception:  # the store is gone: the job is ending (a lost agent ends this rank too)
                return
            now = time.monotonic()
            for rank, count in zip(self.watched, counts):
                if self._counts.get(rank) != count:
                    self._counts[rank], self.moved[rank] = count, now
            if self._stop.wait(self.period):
                return

    def silent(self, ranks: list[int] | None = None, for_s: float | None = None) -> list[int]:
        """The watched ``ranks`` (default: all but this one) whose heartbeat has not moved for ``for_s``
        seconds (default ``timeout_s``)."""
        ranks = [r for r in (self.watched if ranks is None else ranks) if r != self.world.rank]
        bound = self.timeout_s if for_s is None else for_s
        now = time.monotonic()
        return [rank for rank in ranks if now - self.moved[rank] > bound]

    def check(self, ranks: list[int] | None = None) -> None:
        """RankTimeout when one of ``ranks`` has not answered for ``timeout_s`` (``SIGNALLED_S`` once a
        stop signal came)."""
        bound = min(self.timeout_s, SIGNALLED_S) if self.signalled else self.timeout_s
        gone = self.silent(ranks, for_s=bound)
        if gone:
            raise RankTimeout(self._timeout_line(gone, bound))

    def wait_for(self, key: str, ranks: list[int]) -> None:
        """Until ``key`` is set, as long as each of ``ranks`` (who set it) keeps beating and has not ended."""
        delay = 0.001
        while not self.store.check([key]):
            self._answer_roll()
            self._check_ended(ranks)
            self.check(ranks)
            time.sleep(delay)
            delay = min(delay * 2, POLL_S)

    def _check_ended(self, ranks: list[int]) -> None:
        for rank in ranks:
            if self.store.check([_ended_key(rank)]):
                err = RankLost(f"trainer rank {self.world.rank}: trainer rank {rank} ended before the job did (its "
                               "own line, or torchrun's summary, says why)")
                err.quiet = rank == 0  # rank 0 always says what ended it
                raise err

    def stop_signalled(self, signum: int, frame) -> None:
        """The SIGTERM / SIGINT handler of a rank other than 0: rank 0 decides when to stop (and checkpoints
        with the others first), but a signal is also what torchrun's agent sends once a rank has died."""
        self.signalled = True

    def post(self, key: str) -> None:
        self.store.set(key, "1")

    def note_run(self, resume: str, stop=None) -> None:
        """Rank 0: ``resume``, where the run continues (again after each checkpoint), for the line of
        whichever rank or launcher ends the job; ``stop``: its StopRequests, whose signal makes every
        later command wait for a roll call."""
        self.resume = resume
        self._stop_requests = stop if stop is not None else self._stop_requests
        with contextlib.suppress(Exception):
            self.store.set(_RESUME_KEY, resume)
        note(RESUME, resume)

    def stopping(self) -> bool:
        requests = self._stop_requests
        return self.signalled or (requests is not None and requests.signum is not None)

    def roll_call(self) -> None:
        """Rank 0: RankLost unless every other rank answers (or beats) within ``SIGNALLED_S``."""
        others = list(range(1, self.world.size)) if self.world.leader else []
        if not others:
            return
        self._rolls += 1
        key, beats = f"roll/{self._rolls}", [_beat_key(rank) for rank in others]
        before = self.store.multi_get(beats)
        self.post(key)
        missing, deadline = list(zip(others, before)), time.monotonic() + SIGNALLED_S
        while missing:
            if time.monotonic() > deadline:
                ranks = [rank for rank, _ in missing]
                raise RankLost(self._with_resume(
                    f"trainer rank 0: {_ranks(ranks)} {'does' if len(ranks) == 1 else 'do'} not answer (no "
                    f"heartbeat for {SIGNALLED_S:g} s: killed or stopped); no checkpoint of this stop, which "
                    "needs every rank"))
            time.sleep(POLL_S)
            counts = dict(zip(others, self.store.multi_get(beats)))
            missing = [(rank, count) for rank, count in missing
                       if counts[rank] == count and not self.store.check([f"{key}/{rank}"])]

    def _answer_roll(self) -> None:
        if not self.world.leader and self.store.check([f"roll/{self._rolls + 1}"]):
            self._rolls += 1
            self.post(f"roll/{self._rolls}/{self.world.rank}")

    def _with_resume(self, line: str) -> str:
        resume = self.resume
        if not resume:
            with contextlib.suppress(Exception):
                resume = self.store.get(_RESUME_KEY).decode() if self.store.check([_RESUME_KEY]) else ""
        return f"{line}; {resume}" if resume else line

    def announce(self) -> None:
        """Rank 0: its next command is about to be broadcast (the others wait for this, not in the
        broadcast); first a check that no rank has stopped meanwhile, rather than a collective that
        would wait ``timeout_s`` for it, and after a stop signal a roll call."""
        self.check()
        if self.stopping():
            self.roll_call()
        self.post(f"command/{self._sent}")
        self._sent += 1

    def await_command(self) -> None:
        """A rank other than 0: until rank 0 announces its next command, or stops answering."""
        self.wait_for(f"command/{self._sent}", [0])
        self._sent += 1

    def fault(self, err: BaseException) -> RankLost | None:
        """``err`` as the job's lost rank (None when it is something else), marked ``quiet`` unless this
        rank is the first to say it."""
        if isinstance(err, RankLost):
            found = err
            if found.quiet:
                return found
        elif self.signalled and not timed_out(err) and lost_rank(err):
            found = RankLost(lost_message(self.world.rank, err))
            found.quiet = True  # after a stop signal, a closed connection is the agent ending the job
            return found
        elif timed_out(err):
            found = RankTimeout(self._timeout_line(self.silent(for_s=3 * self.period), self.timeout_s))
        elif lost_rank(err):
            found = RankLost(self._with_resume(lost_message(self.world.rank, err)))
            if os.environ.get(SAID_ENV):  # the launcher saw which rank ended, and how: it says so
                note(f"{LOST}.{self.world.rank}")
                found.quiet = True
                return found
        else:
            return None
        found.quiet = not self._first_to_say()
        if not found.quiet:
            hold_off_sigterm()
        return found

    def _timeout_line(self, silent: list[int], waited_s: float) -> str:
        bound = f"trainer.fsdp.timeout_s={self.timeout_s:g} s"
        if waited_s < self.timeout_s:
            bound = f"{waited_s:g} s of a stop signal"
        if silent:
            ranks = ", ".join(map(str, silent))
            return (f"trainer rank {self.world.rank}: no answer from trainer rank {ranks} within {bound} (its "
                    "heartbeat stopped: a stopped or frozen process); the job ends")
        return (f"trainer rank {self.world.rank}: a collective got no answer within {bound} (another rank "
                "is hung or slow); the job ends")

    def _first_to_say(self) -> bool:
        try:
            first = self.store.add("said", 1) == 1
        except Exception:  # no store to ask: say it
            first = True
        if first and os.environ.get(SAID_ENV):  # `asyncrl train --nproc-per-node` then adds no line of its own
            with contextlib.suppress(OSError):
                open(os.environ[SAID_ENV], "a").close()
        return first

    def close(self) -> None:
        """This rank has ended (whatever ended it): a rank waiting for it stops waiting."""
        self._stop.set()
        with contextlib.suppress(Exception):
            self.store.set(_ended_key(self.world.rank), "1")
        self._thread.join(timeout=self.period + 1)


_RESUME_KEY = "resume"


def _ranks(ranks: list[int]) -> str:
    return f"trainer rank {ranks[0]}" if len(ranks) == 1 else f"trainer ranks {', '.join(map(str, ranks))}"


def _beat_key(rank: int) -> str:
    return f"beat/{rank}"


def _ended_key(rank: int) -> str:
    return f"ended/{rank}"
