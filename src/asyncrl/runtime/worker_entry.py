"""The first code of the processes a run starts beside the trainer, so that none outlives it: the
standard library only, because it runs before anything slow.

**Rollout worker processes** (:func:`start_guarded`). A ``spawn`` child runs its target only after
multiprocessing's bootstrap has imported the parent's ``__main__`` module and unpickled the
target's arguments; a worker's arguments (its ``WorkerSpec``, the weight channel's shared tensors)
import torch and asyncrl's runtime as they unpickle: seconds of imports. A trainer SIGKILLed then
left the child to finish them and find ``getppid() == 1``, with nothing to compare it with: an
orphan for good. So here

* the target is :func:`start`, in this module, whose import is the standard library;
* the real target and its arguments travel as one pickled byte string (:class:`PickledAtSpawn`,
  pickled by multiprocessing's own pickler while the process is being spawned, when queues,
  semaphores and shared tensors may be pickled) that :func:`start` unpickles only after
  :func:`arm_parent_death_guard`;
* the parent's ``__main__`` is hidden from the spawn: a worker needs nothing from it (reward
  functions reach it by import path or by value) and importing it (the CLI, or the user's script)
  would come before the guard.

The guard: Linux's parent-death signal (SIGKILL when the spawning *thread* ends: workers are
started from the trainer's main thread), then a check that the parent is still the trainer, by
the pid the trainer passed: one that died before the signal was armed is caught there.

The reaper of a private Ray cluster's processes, also started beside the trainer and also the
standard library only, is :mod:`asyncrl.runtime.ray.reaper`.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
from collections.abc import Callable, Iterator

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class PickledAtSpawn:
    """``value`` pickled on its own by multiprocessing's pickler while the process is spawned; the
    child receives the bytes, and unpickles them when it chooses."""

    def __init__(self, value: object):
        self.value = value

    def __reduce__(self):
        from multiprocessing.reduction import ForkingPickler

        return bytes, (bytes(ForkingPickler.dumps(self.value)),)


@contextlib.contextmanager
def _main_hidden() -> Iterator[None]:
    """Spawn children import the parent's ``__main__`` before their target runs, unless it has no
    spec and no file: a blank module stands in while the process starts."""
    main = sys.modules.get("__main__")
    if main is not None:
        sys.modules["__main__"] = type(sys)("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def start_guarded(ctx, target: Callable, args: tuple, name: str):
    """Start ``target(*args)`` in a daemon process of the ``spawn`` context ``ctx`` whose
    parent-death guard is armed before ``args`` are unpickled. Returns the started process."""
    process = ctx.Process(target=start, args=(os.getpid(), PickledAtSpawn((target, args))), daemon=True, name=name)
    with _main_hidden():
        process.start()
    return process


def _leave_stop_signals_to_the_trainer() -> None:
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def arm_parent_death_guard(parent_pid: int) -> None:
    """End this process when ``parent_pid`` (the process that spawned it) does, even by SIGKILL;
    exit at once if it already has. Ctrl-C reaches the whole process group, and so does SIGTERM
    from torchrun (which signals each rank's group) or Slurm (every process of the job step): the
    trainer handles both, checkpoints and stops its workers, so both are ignored here (a worker
    that died of them would be restarted, and its unit lost, just before the stop)."""
    _leave_stop_signals_to_the_trainer()
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)


def start(parent_pid: int, payload: bytes) -> None:
    """Spawn target: arm the guard, then unpickle the real target and its arguments and run it."""
    arm_parent_death_guard(parent_pid)
    target, args = pickle.loads(payload)
    target(*args)
