"""Runtime: the loops that connect rollout, buffer and trainer, one per ``run.mode``."""

from asyncrl.runtime.async_local import run_async
from asyncrl.runtime.simulated import run_simulated
from asyncrl.runtime.sync import run_sync

RUNNERS = {"sync": run_sync, "async": run_async, "simulated": run_simulated}

__all__ = ["RUNNERS", "run_async", "run_simulated", "run_sync"]
