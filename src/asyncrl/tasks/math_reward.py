"""Math answer rewards through math-verify, run in a guarded process pool.

Pipeline per completion (see :meth:`MathVerifier.score_many`):

1. **Extract** the model's final answer in the calling process (cheap, linear-time
   string scans; :func:`extract_final_answer`): the text after the first ``####``
   marker (first, like :func:`asyncrl.tasks.base.extract_answer`: the answer a policy
   commits to first, so hedging with several markers earns nothing), else the last
   balanced ``\\boxed{...}``, else the last number in the text. No answer -> 0.0.
2. **Fast path**: if the extracted answer equals the gold answer after a trivial,
   meaning-preserving normalization (spaces, ``$``, ``\\dfrac`` -> ``\\frac``, ...),
   the reward is 1.0 without leaving the process.
3. **math-verify** otherwise: ``verify(parse(gold), parse(pred))`` (see
   :func:`check_answer`) in a worker of a ``ProcessPoolExecutor`` ("spawn" context).

Why a process pool: math-verify 0.9 bounds parsing/comparison with ``signal.alarm``,
which only works in a process's main thread, and sympy can be driven into very long
computations (``9^{9^{9^{9}}}``) or even C-level loops that no signal interrupts. So
each worker runs one check at a time in its main thread with two limits:

* a **soft** limit (``0.8 * timeout_s``): a ``setitimer`` alarm raises inside the worker,
  the check scores 0 and the worker lives on (cheap, handles sympy blow-ups);
* a **hard** limit (``timeout_s``): the parent sees from a shared-memory table which item
  each worker runs since when; an item past ``timeout_s`` gets 0, the pool is killed
  (SIGKILL) and re-created, and the other unfinished items are re-submitted.

A check never raises: malformed output, worker crashes and timeouts all score 0.0
(crashing items are retried once, in case the crash was another item's fault).
Pools are started lazily, shut down by :meth:`MathVerifier.close`, by the context
manager, and at interpreter exit (also inside multiprocessing children); workers exit on
their own if their parent dies.
"""

from __future__ import annotations

import atexit
import concurrent.futures as cf
import contextlib
import importlib.util
import itertools
import logging
import math
import multiprocessing as mp
import multiprocessing.util as mp_util
import os
import pickle
import signal
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from asyncrl.tasks.math_answer import (MAX_ANSWER_CHARS, check_answer, extract_final_answer, last_boxed,
                                         normalize_answer)

__all__ = [
    "MAX_ANSWER_CHARS",
    "MathVerifier",
    "check_answer",
    "extract_final_answer",
    "last_boxed",
    "normalize_answer",
]

# Soft limit (signal inside the worker) as a fraction of the hard limit (pool kill).
_SOFT_FRACTION = 0.8
# At most this many checks travel to a worker in one message.
_MAX_CHUNK = 16
# An item that crashed its worker is retried this many times in total before scoring 0.
_MAX_ATTEMPTS = 2
# A fresh pool that has not started any check after this long is considered broken.
_STARTUP_TIMEOUT_S = 120.0
# Address-space cap of a worker (sympy can allocate without bound on huge integers).
_WORKER_ADDRESS_SPACE = 4 << 30

class _SoftTimeout(BaseException):
    """Raised by SIGALRM inside a worker; a BaseException so that no ``except Exception``
    in math-verify or sympy swallows it."""


_slot = -1
_ids: Any = None
_starts: Any = None
_soft_s = 0.0


def _on_alarm(signum: int, frame: Any) -> None:
    raise _SoftTimeout()


def _init_worker(ids: Any, starts: Any, counter: Any, soft_s: float, parent_pid: int) -> None:
    global _slot, _ids, _starts, _soft_s
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    with counter.get_lock():
        _slot = counter.value
        counter.value += 1
    _ids, _starts, _soft_s = ids, starts, soft_s
    with contextlib.suppress(Exception):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard >= _WORKER_ADDRESS_SPACE:
            resource.setrlimit(resource.RLIMIT_AS, (_WORKER_ADDRESS_SPACE, hard))
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    signal.signal(signal.SIGALRM, _on_alarm)

    def watchdog() -> None:  # exit if the parent died without shutting the pool down
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(0)

    threading.Thread(target=watchdog, name="asyncrl-verify-watchdog", daemon=True).start()
    with contextlib.suppress(BaseException):  # warm up imports and math-verify's lazy regexes
        check_answer("\\frac{1}{2}", "0.5")


def _run_chunk(check_fn: Callable[[str, str], Any], items: list[tuple[int, str, str]]) -> list[tuple[float, str]]:
    """Worker side: ``(score, status)`` per ``(item id, pred, gold)``; status "ok" | "timeout" | "error".

    Each item is published in the shared table (id, start time) while it runs, so the
    parent can tell which item overran and must be abandoned.
    """
    out = []
    for item_id, pred, gold in items:
        _starts[_slot] = time.monotonic()
        _ids[_slot] = item_id
        try:
            try:
                try:
                    signal.setitimer(signal.ITIMER_REAL, _soft_s)
                    ok = check_fn(pred, gold)
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                out.append(((1.0 if ok else 0.0), "ok"))
            except _SoftTimeout:
                out.append((0.0, "timeout"))
            except BaseException:  # includes MemoryError, RecursionError, sympy internals
                out.append((0.0, "error"))
        finally:
            _ids[_slot] = -1
    return out


# --- the pool ---------------------------------------------------------------------------


logger = logging.getLogger(__name__)
_LIVE: weakref.WeakSet[MathVerifier] = weakref.WeakSet()


def _close_all() -> None:
    for verifier in list(_LIVE):
        with contextlib.suppress(Exception):
            verifier.close()


atexit.register(_close_all)
# Inside multiprocessing children (e.g. rollout worker processes) atexit does not run,
# but multiprocessing's own exit path runs these finalizers before joining children.
mp_util.Finalize(None, _close_all, exitpriority=100)


@contextlib.contextmanager
def _spawn_guard() -> Iterator[None]:
    """Make starting the pool's processes work from anywhere.

    * A daemonic multiprocessing process (e.g. an asyncrl rollout worker) may not have
      children; the workers watch their parent and exit when it dies, which is what that
      rule protects against, so the flag is lifted while the processes start.
    * "spawn" children re-import the parent's ``__main__`` (an unguarded script would run
      again, a CLI module would import torch in every worker); the workers need nothing
      from it, so it is hidden from multiprocessing while the processes start.

    Only held for the few milliseconds of :meth:`MathVerifier._ensure_pool`.
    """
    config = getattr(mp.current_process(), "_config", None)
    daemon = isinstance(config, dict) and bool(config.get("daemon"))
    main = sys.modules.get("__main__")
    if daemon:
        config["daemon"] = False
    if main is not None:
        sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main
        if daemon:
            config["daemon"] = True


def _noop() -> None:
    return None


class _PoolFailure(Exception):
    """The pool must go. ``culprits`` (items past the hard timeout) score 0; ``suspects``
    (items busy when a worker crashed) use up an attempt; other unfinished items are re-run."""

    def __init__(self, culprits: set[int], suspects: set[int] = frozenset(), reason: str = "") -> None:
        super().__init__(culprits, suspects, reason)
        self.culprits = culprits
        self.suspects = suspects
        self.reason = reason


class MathVerifier:
    """Scores completions against gold answers with math-verify in a guarded process pool.

    ``timeout_s`` is the hard bound on one check (the worker is killed past it) and
    ``workers`` the number of worker processes (started lazily, on first use or
    :meth:`warmup`). ``check_fn(pred, gold) -> bool`` is the check run in the workers; it
    must be a picklable module-level function (default :func:`check_answer`).

    Thread-safe (calls are serialized). Not picklable state: a pickled verifier (e.g. as
    part of a task sent to another process) arrives without a pool and starts its own.
    """

    def __init__(
        self,
        timeout_s: float = 5.0,
        workers: int = 1,
        *,
        check_fn: Callable[[str, str], Any] = check_answer,
    ) -> None:
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not (
            math.isfinite(timeout_s) and timeout_s > 0
        ):
            raise ValueError(f"timeout_s: must be a finite number > 0, got {timeout_s!r}")
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ValueError(f"workers: must be an int >= 1, got {workers!r}")
        if getattr(check_fn, "__module__", None) == "__main__":
            raise ValueError("check_fn: must live in an importable module (workers do not import __main__)")
        try:
            pickle.dumps(check_fn)
        except Exception as exc:
            raise ValueError(f"check_fn: must be a picklable module-level function ({exc})") from None
        if check_fn is check_answer and importlib.util.find_spec("math_verify") is None:
            raise ImportError('math-verify is not installed: pip install "math-verify[antlr4_13_2]"')
        self.timeout_s = float(timeout_s)
        self.workers = workers
        self.check_fn = check_fn
        self.stats = {"checks": 0, "fast_path": 0, "no_answer": 0, "soft_timeouts": 0, "hard_timeouts": 0,
                      "errors": 0, "pool_restarts": 0}
        self._lock = threading.RLock()
        self._pool: cf.ProcessPoolExecutor | None = None
        self._ids: Any = None
        self._starts: Any = None
        self._pool_started = 0.0
        self._item_ids = itertools.count()
        self._closed = False
        _LIVE.add(self)

    # -- public API --

    def score(self, completion: str, gold: str) -> float:
        """1.0 if ``completion``'s final answer is equivalent to ``gold``, else 0.0."""
        return self.score_many([completion], [gold])[0]

    def score_many(self, completions: Sequence[str], golds: Sequence[str]) -> list[float]:
        """Rewards (0.0 / 1.0) for ``completions[i]`` against ``golds[i]``; never raises on content."""
        if len(completions) != len(golds):
            raise ValueError(f"score_many: {len(completions)} completions but {len(golds)} golds")
        if self._closed:
            raise RuntimeError("MathVerifier is closed")
        results = [0.0] * len(completions)
        jobs: list[tuple[int, str, str]] = []
        for i, (completion, gold) in enumerate(zip(completions, golds)):
            pred = extract_final_answer(completion)
            if pred is None or not isinstance(gold, str) or not gold.strip():
                self.stats["no_answer"] += 1
                continue
            if normalize_answer(pred) == normalize_answer(gold):
                self.stats["fast_path"] += 1
                results[i] = 1.0
                continue
            jobs.append((i, pred, gold.strip()))
        if jobs:
            with self._lock:
                if self._closed:
                    raise RuntimeError("MathVerifier is closed")
                self._verify(jobs, results)
        return results

    def warmup(self) -> None:
        """Start the worker processes now (they import math-verify: ~1-2 s), and wait for them."""
        with self._lock:
            self._ensure_pool()
            stats = dict(self.stats)
            self._verify([(0, "1", "2")], [0.0])
            self.stats = stats

    def close(self) -> None:
        """Shut the pool down (idempotent); a closed verifier refuses further checks."""
        with self._lock:
            self._closed = True
            self._shutdown(kill=False)

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for key in ("_lock", "_pool", "_ids", "_starts", "_item_ids"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()
        self._pool, self._ids, self._starts = None, None, None
        self._item_ids = itertools.count()
        self._closed = False
        _LIVE.add(self)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._shutdown(kill=False)

    # -- internals --

    @property
    def _poll_s(self) -> float:
        return min(0.05, self.timeout_s / 10)

    def _ensure_pool(self) -> cf.ProcessPoolExecutor:
        if self._pool is None:
            ctx = mp.get_context("spawn")
            self._ids = ctx.RawArray("q", [-1] * self.workers)
            self._starts = ctx.RawArray("d", self.workers)
            counter = ctx.Value("i", 0)
            soft = max(0.001, _SOFT_FRACTION * self.timeout_s)
            pool = cf.ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_init_worker,
                initargs=(self._ids, self._starts, counter, soft, os.getpid()),
            )
            # With "spawn", each submit that finds no idle worker starts one: start them all
            # here, under the guard, so later submits never start processes.
            with _spawn_guard():
                for _ in range(self.workers):
                    pool.submit(_noop)
            self._pool = pool
            self._pool_started = time.monotonic()
        return self._pool

    def _shutdown(self, kill: bool) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        procs = list((getattr(pool, "_processes", None) or {}).values())
        if kill:
            for proc in procs:
                with contextlib.suppress(Exception):
                    proc.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + (1.0 if kill else 3.0)
        for proc in procs:
            with contextlib.suppress(Exception):
                # at least a short join each: a shared deadline spent on the first worker (a loaded
                # machine) must not leave the others unreaped
                proc.join(max(0.2, deadline - time.monotonic()))
        for proc in procs:  # stragglers: kill, then reap without a time limit (SIGKILL cannot be ignored)
            with contextlib.suppress(Exception):
                if proc.exitcode is None:
                    proc.kill()
                    proc.join()

    def _running(self) -> list[tuple[int, float]]:
        """(item id, seconds running) for every busy worker."""
        now, out = time.monotonic(), []
        if self._ids is None:
            return out
        for slot in range(self.workers):
            item = self._ids[slot]
            if item >= 0:
                out.append((item, now - self._starts[slot]))
        return out

    def _verify(self, jobs: list[tuple[int, str, str]], results: list[float]) -> None:
        """Score ``jobs`` ``(result index, pred, gold)`` into ``results``, surviving any worker failure.

        Jobs travel in chunks (fewer round trips: IPC costs about as much as a numeric
        check); the shared table still times every item on its own.
        """
        attempts = [0] * len(jobs)
        done: set[int] = set()  # job indices already recorded
        todo = list(range(len(jobs)))
        while todo:
            item_of: dict[int, int] = {}  # job index -> item id
            chunks: list[tuple[list[int], cf.Future]] = []
            try:
                pool = self._ensure_pool()
                size = max(1, min(_MAX_CHUNK, len(todo) // (4 * self.workers)))
                for start in range(0, len(todo), size):
                    members = todo[start : start + size]
                    items = []
                    for j in members:
                        item_of[j] = next(self._item_ids)
                        items.append((item_of[j], jobs[j][1], jobs[j][2]))
                    chunks.append((members, pool.submit(_run_chunk, self.check_fn, items)))
                self._collect(chunks, set(item_of.values()), results, jobs, done)
                todo = []
            except _PoolFailure as failure:
                self._shutdown(kill=True)
                self.stats["pool_restarts"] += 1
                if failure.culprits:
                    logger.info("math-verify: %d check(s) exceeded %.1fs; verifier pool restarted",
                                len(failure.culprits), self.timeout_s)
                else:
                    logger.warning("math-verify: verifier pool failed (%s); restarted",
                                   failure.reason)
                for members, future in chunks:
                    if future.done() and not future.cancelled() and future.exception() is None:
                        for j, outcome in zip(members, future.result()):
                            if j not in done:
                                self._record(j, jobs, outcome, results, done)
                blame_all = not failure.culprits and not failure.suspects
                todo = []
                for j in sorted(set(item_of) - done):
                    if item_of[j] in failure.culprits:
                        self.stats["hard_timeouts"] += 1
                        continue
                    if blame_all or item_of[j] in failure.suspects:
                        attempts[j] += 1
                    if attempts[j] < _MAX_ATTEMPTS:
                        todo.append(j)
                    else:
                        self.stats["errors"] += 1
            except BaseException:  # KeyboardInterrupt etc.: never leave a busy pool behind
                self._shutdown(kill=True)
                raise

    def _collect(self, chunks: list[tuple[list[int], cf.Future]], ours: set[int], results: list[float],
                 jobs: list, done: set[int]) -> None:
        last_progress = time.monotonic()
        for members, future in chunks:
            while True:
                try:
                    outcomes = future.result(timeout=self._poll_s)
                except cf.TimeoutError:
                    running = self._running()
                    overdue = {item for item, age in running if age > self.timeout_s}
                    if overdue:
                        raise _PoolFailure(overdue & ours) from None
                    idle_for = time.monotonic() - max(last_progress, self._pool_started)
                    if not running and idle_for > _STARTUP_TIMEOUT_S:
                        raise _PoolFailure(set(), reason=f"no check started in {_STARTUP_TIMEOUT_S:.0f}s") from None
                    continue
                except Exception as exc:  # BrokenProcessPool, CancelledError, ...: suspect the busy items
                    busy = {item for item, _ in self._running()} & ours
                    raise _PoolFailure(set(), busy, reason=f"{type(exc).__name__}: {exc}") from None
                for j, outcome in zip(members, outcomes):
                    self._record(j, jobs, outcome, results, done)
                last_progress = time.monotonic()
                break

    def _record(self, j: int, jobs: list, outcome: tuple[float, str], results: list[float], done: set[int]) -> None:
        done.add(j)
        score, status = outcome
        self.stats["checks"] += 1
        if status == "timeout":
            self.stats["soft_timeouts"] += 1
        elif status == "error":
            self.stats["errors"] += 1
        results[jobs[j][0]] = 1.0 if score == 1.0 else 0.0
