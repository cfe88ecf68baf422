"""The trainer's data-parallel seam: what changes in a minibatch update when processes share it.

:class:`~asyncrl.training.trainer.Learner` runs one update as the algorithm reads — for each
micro-batch: log-probs, π_prox, loss, backward; then clip and step — and asks a strategy object,
given to it at construction, the four questions that data parallelism answers differently:

* :meth:`SingleProcess.rows_of` — which rows of the minibatch this process runs, in which micro-batches;
* :meth:`SingleProcess.scale` — what a micro-batch's loss counts for in the summed gradient;
* :meth:`SingleProcess.gather` — the minibatch's detached log-probs, from this process's micro-batches
  (the step's statistics, the ESS and VCPO's learning-rate scale are computed from them);
* :meth:`SingleProcess.all_finite` / :meth:`SingleProcess.whole` — whether every process may
  step, and the gradient norm made whole;

and, for the step's extra no-grad pass (π_prox by recomputation, ``trainer.prox_error``),
:meth:`SingleProcess.exact_logprobs` — the whole batch's log-probs from this process's rows.

:class:`SingleProcess`, the default, answers "all of them, as they are": its hooks leave the update
exactly the single-process algorithm. The torchrun strategy is
:class:`asyncrl.training.data_parallel.DataParallel`, which subclasses it. The checkpoint hooks
(:meth:`SingleProcess.optimizer_state` and the rest) are the same seam for the optimizer state.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

import torch
from torch import Tensor

from asyncrl.training.steps import MinibatchParts, micro_bounds
from asyncrl.types import Batch


class MicroBatch(NamedTuple):
    """One forward/backward pass of a minibatch update: its rows ``[lo, hi)`` of the minibatch.
    ``stand_in``: the pass (of row 0) only keeps this process in step with the others' collectives
    (its loss counts zero and its results are dropped)."""

    lo: int
    hi: int
    stand_in: bool = False


class SingleProcess:
    """One process trains every row of every minibatch: each hook is the identity of the algorithm."""

    size = 1
    # the minibatch is shared among processes: each micro-batch's loss is a share of the minibatch's
    # mean and every process runs every backward pass (a collective), finite or not
    split = False

    def rows_of(self, rows: int, micro_batch_size: int) -> list[MicroBatch]:
        """The forward/backward passes this process runs for a minibatch of ``rows`` rows."""
        return [MicroBatch(lo, hi) for lo, hi in micro_bounds(rows, micro_batch_size)]

    def scale(self, loss: Tensor, micro: MicroBatch) -> Tensor:
        """The micro-batch's loss (0-dim) as it enters the summed gradient."""
        return loss

    def gather(self, parts: MinibatchParts, micros: list[MicroBatch], rows: int) -> MinibatchParts:
        """The minibatch's [rows, T] tensors in ``parts``, joined from those of ``micros``
        (one entry per micro-batch)."""
        parts.join()
        return parts

    def all_finite(self, finite: bool) -> bool:
        """Whether every process's loss was finite (then each steps; else each skips the update)."""
        return finite

    def whole(self, value: Tensor) -> Tensor:
        """A value of the sharded parameters (the gradient norm) as a whole tensor."""
        return value

    def exact_logprobs(self, batch: Batch, sizes: list[int], micro_batch_size: int,
                       logprobs: Callable[..., tuple[Tensor, Tensor | None]]) -> Tensor:
        """[B, T] log-probs of the step's whole batch (minibatches of ``sizes`` rows, in order) by
        ``logprobs`` (the trainer's :meth:`~asyncrl.training.trainer.Learner.logprobs`), in forward
        passes of at most ``micro_batch_size`` rows (0: of the largest minibatch)."""
        return logprobs(batch, rows_per_forward=micro_batch_size or max(sizes))[0]

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """The optimizer's entry of a checkpoint's trainer state: here the whole state dict."""
        return optimizer.state_dict()

    def write_shards(self, optimizer: torch.optim.Optimizer, checkpoint: Path) -> None:
        """Nothing: one process's optimizer state is all in :meth:`optimizer_state`."""

    def shard_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        """Bytes :meth:`write_shards` writes, all ranks together."""
        return 0

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """A checkpoint's optimizer entry: whole (a single-process checkpoint) or sharded (written by
        several ranks, read here as whole tensors)."""
        from asyncrl.training.sharded_state import is_sharded, load_shards

        if is_sharded(state):
            load_shards(optimizer, state, distributed=False)
        else:
            optimizer.load_state_dict(state)
