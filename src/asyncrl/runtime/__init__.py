"""Runtime: the loops that connect rollout, buffer and trainer (sync now; async/simulated later)."""

from asyncrl.runtime.sync import run_sync

__all__ = ["run_sync"]
