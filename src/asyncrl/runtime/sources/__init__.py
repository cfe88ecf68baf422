"""Batch sources: where the training loop's batches come from, one per ``run.mode``.

What a source is, is :class:`BatchSource`: the methods the loop (:mod:`asyncrl.runtime.loop`) and
its parts (the checkpoint, the step log, the ESS check) call. Two more are optional, looked up with
``getattr``: ``take_episode_records()`` (the rows of the episodes behind the last ``step_metrics``,
for ``episodes.jsonl``; [] for single completions) and ``eval_engine()`` (an engine in this process
that evaluation may generate through: one with ``with_sampling``, holding the newest weights, or
None; a source without it, as async's, whose engines are in other processes, leaves evaluation on
the trainer's model). A source restores itself from ``session.resume`` when it is built.

A new mode is one source plus one line in :data:`asyncrl.core.registries.MODES` (a ``ModeEntry``:
its import path, called ``(cfg, session)``, and whether it has a look-ahead window).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from asyncrl.core.import_path import resolve
from asyncrl.core.registries import MODES

if TYPE_CHECKING:
    import torch

    from asyncrl.types import Batch

__all__ = ["BatchSource", "open_source"]


@runtime_checkable
class BatchSource(Protocol):
    """The seam between the training loop and generation, one per ``run.mode``. The loop enters it
    (``with``), waits for it to be ready, then each step asks for a batch, trains on it, and tells
    the source how it went and what the new weights are."""

    @property
    def n_generators(self) -> int:
        """How many generators make batches (rollout workers; 1 in this process): the step's row."""
        ...

    def __enter__(self) -> BatchSource:
        ...

    def __exit__(self, *exc: object) -> None:
        """Release what the source holds: its workers, engines and endpoints."""
        ...

    def wait_ready(self) -> None:
        """Return once every generator can take work (started, engines loaded)."""
        ...

    def next_batch(self, version: int, step: int) -> Batch:
        """Step ``step``'s batch, CPU tensors, while the trainer holds weights ``version``. A stop
        signal or an environment past its failure policy raises; the step is then generated again
        on resume."""
        ...

    def observe(self, stats: dict[str, float], wait_frac: float) -> None:
        """The train step's statistics and the share of the step spent waiting for the batch (async
        adapts its look-ahead window to them)."""
        ...

    def publish(self, model: torch.nn.Module, version: int) -> None:
        """``model``'s weights as ``version``, for the batches to come (the weight channel, or a
        snapshot kept in this process)."""
        ...

    def step_metrics(self) -> dict[str, float]:
        """The step's generation and weight-sync figures, under the same names in every mode;
        reset by the call."""
        ...

    def take_dropped_groups(self) -> list[int]:
        """Group ids generated and dropped unused since the last call, for the ledger."""
        ...

    def state_dict(self) -> dict:
        """What a checkpoint needs to resume the source exactly: prompt cursor, RNGs, buffered and
        in-flight work."""
        ...

    def summary(self) -> dict:
        """The source's figures for the run's summary."""
        ...


def open_source(cfg, session) -> BatchSource:
    """The batch source of ``run.mode``: its entry of :data:`asyncrl.core.registries.MODES`, called
    ``(cfg, session)``."""
    return resolve(MODES[cfg.run.mode].target)(cfg, session)
