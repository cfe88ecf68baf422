"""How a run's torch threads share the machine (``policy.torch_threads``, docs/runtime.md).

``policy.torch_threads: 0`` (the default) shares out the cores this process may use: a synchronous
or simulated run is one process and takes them all; an asynchronous run gives each local rollout
worker one thread and the trainer the rest; torchrun ranks on one node split them evenly. A speed
comparison between modes is only fair when each arm has the same cores, and this rule gives every
mode the whole machine. ``OMP_NUM_THREADS``, when set, caps the cores counted (as it caps torch's own
default), so a test runner or a batch scheduler that sets it is obeyed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from asyncrl.core.registries import BACKENDS, HOST, MODES

AUTO = 0  # policy.torch_threads: share the machine's cores out (this module)
WORKER_THREADS = 1  # each local rollout worker process: one thread (runtime/worker.py)


def available_cores(*, honour_env: bool = True) -> int:
    """The cores this process may run on (its CPU affinity), capped by ``OMP_NUM_THREADS`` when set."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    env = os.environ.get("OMP_NUM_THREADS", "") if honour_env else ""
    if env.strip().isdigit() and int(env) > 0:
        cores = min(cores, int(env))
    return max(cores, 1)


@dataclass(frozen=True)
class ThreadPlan:
    """The torch threads of one run's processes on this machine."""

    trainer: int  # threads of the trainer process (each torchrun rank)
    workers: int  # local rollout worker processes, one thread each (0 in sync/simulated mode)
    ranks: int = 1  # torchrun ranks on this node

    @property
    def total(self) -> int:
        return self.trainer * self.ranks + self.workers * WORKER_THREADS

    def describe(self) -> str:
        trainer = f"{self.trainer} thread{'s' if self.trainer != 1 else ''}"
        if self.ranks > 1:
            trainer = f"{self.ranks} ranks × {trainer}"
        if not self.workers:
            return f"trainer {trainer}"
        return f"trainer {trainer} + {self.workers} rollout worker{'s' if self.workers != 1 else ''} × {WORKER_THREADS}"

    def as_dict(self) -> dict:
        return {"trainer_threads": self.trainer, "rollout_workers": self.workers,
                "worker_threads": WORKER_THREADS, "ranks": self.ranks, "total_threads": self.total}


def local_workers(cfg) -> int:
    """Rollout worker processes this machine runs beside the trainer: the local backend's in async
    mode (a Ray cluster places its actors itself; sync and simulated runs generate in the trainer)."""
    mode, backend = MODES.get(cfg.run.mode), BACKENDS.get(cfg.async_.backend)
    if mode is None or not mode.rollout_workers or backend is None or HOST not in backend.provides:
        return 0
    return cfg.async_.n_workers


def thread_plan(cfg, *, ranks: int = 1, cores: int | None = None) -> ThreadPlan:
    """The thread allocation of ``cfg`` (a :class:`~asyncrl.config.Config`) with ``ranks`` torchrun
    ranks on this node; ``cores``: the cores to share (default: :func:`available_cores`)."""
    workers = local_workers(cfg)
    if cfg.policy.torch_threads != AUTO:
        return ThreadPlan(cfg.policy.torch_threads, workers, ranks)
    cores = available_cores() if cores is None else cores
    return ThreadPlan(max(1, (cores - workers * WORKER_THREADS) // max(ranks, 1)), workers, ranks)


def trainer_threads(cfg, *, ranks: int = 1) -> int:
    """What ``torch.set_num_threads`` gets in a trainer process (rank) of ``cfg``."""
    return thread_plan(cfg, ranks=ranks).trainer
