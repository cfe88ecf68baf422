"""How the trainer's minibatch updates are shared among processes: the torchrun strategy of the
trainer's data-parallel seam (asyncrl.training.parallel).

Every rank holds the whole step's batch (the leader broadcasts it), computes the advantages of all
of it and draws the same minibatch permutation, so group baselines and the minibatches are the same
as in one process. Each minibatch's rows are then split over the ranks in contiguous shares, which
each rank trains in micro-batches: exactly what ``trainer.micro_batch_size`` does in one process,
so a loss that splits exactly into micro-batches (its ``LossEntry.micro_batch_exact``) splits exactly over
ranks. Each rank's loss is its share of the minibatch's mean (the minibatch's token and sequence
counts are passed in), times the world size, because FSDP averages the ranks' gradients: the sum of
the shares' gradients is the minibatch's gradient.

Collectives must match across ranks: every rank runs the same number of forward and backward passes
per update (a rank with fewer rows than micro-batches runs a stand-in pass, of row 0, whose loss is
multiplied by zero and whose results are dropped), agrees on whether the update is skipped (one
all-reduce), and gathers the minibatch's log-probs so that the logged statistics, the ESS and VCPO's
learning-rate scale are those of the whole minibatch on every rank.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import torch
from torch import Tensor

from asyncrl.distributed.world import World, collective_device
from asyncrl.training.parallel import MicroBatch, SingleProcess
from asyncrl.training.steps import MinibatchParts
from asyncrl.types import Batch


def shares(rows: int, size: int) -> list[tuple[int, int]]:
    """[(lo, hi)] contiguous row ranges of ``rows`` for ranks 0..size-1, sizes differing by at most one."""
    base, extra = divmod(rows, size)
    bounds, lo = [], 0
    for rank in range(size):
        hi = lo + base + (1 if rank < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class DataParallel(SingleProcess):
    """``world.size`` ranks, each training its share of every minibatch on an FSDP2-sharded model.
    A run shards only with two ranks or more; a world of one is the tests' check that the sharded
    path itself changes nothing (and runs on one GPU)."""

    split = True

    def __init__(self, world: World):
        self.world = world
        self.size = world.size

    def rows_of(self, rows: int, micro_batch_size: int) -> list[MicroBatch]:
        """This rank's share in micro-batches, as many passes on every rank (stand-ins where its share
        has fewer rows than the largest share has micro-batches)."""
        if rows < self.size:
            raise ValueError(f"trainer: a minibatch of {rows} rows cannot be shared by {self.size} ranks "
                             "(fewer trainer.n_minibatches, or a larger batch)")
        offset, end = shares(rows, self.size)[self.world.rank]
        largest = math.ceil(rows / self.size)
        n_micro = 1 if micro_batch_size <= 0 else math.ceil(largest / micro_batch_size)
        return [MicroBatch(offset + lo, offset + hi) if hi > lo else MicroBatch(0, 1, stand_in=True)
                for lo, hi in shares(end - offset, n_micro)]

    def scale(self, loss: Tensor, micro: MicroBatch) -> Tensor:
        """The world size times the pass's loss (FSDP divides the summed gradient by it); zero for a stand-in."""
        return loss * (0.0 if micro.stand_in else float(self.size))

    def gather(self, parts: MinibatchParts, micros: list[MicroBatch], rows: int) -> MinibatchParts:
        """The whole minibatch's log-probs, entropy, π_prox and reference log-probs on every rank."""
        parts.keep([not micro.stand_in for micro in micros])
        parts.join()
        parts.logp, parts.entropy = self.gather_rows(parts.logp, rows), self.gather_rows(parts.entropy, rows)
        parts.prox_logp = self.gather_rows(parts.prox_logp, rows)
        parts.ref_logp = self.gather_rows(parts.ref_logp, rows)
        return parts

    def exact_logprobs(self, batch: Batch, sizes: list[int], micro_batch_size: int,
                       logprobs: Callable[..., tuple[Tensor, Tensor | None]]) -> Tensor:
        """Each minibatch's rows in this rank's passes, gathered: the whole batch's [B, T] on every rank."""
        out, start = [], 0
        for size in sizes:
            minibatch = batch.rows(start, start + size)
            micros = self.rows_of(size, micro_batch_size)
            own = [logprobs(minibatch.rows(micro.lo, micro.hi))[0] for micro in micros]
            kept = [logp for logp, micro in zip(own, micros) if not micro.stand_in]
            out.append(self.gather_rows(torch.cat(kept), size))
            start += size
        return torch.cat(out)

    def all_finite(self, finite: bool) -> bool:
        flag = torch.tensor([1 if finite else 0], dtype=torch.int32, device=collective_device())
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
        return bool(flag.item())

    def gather_rows(self, tensor: Tensor | None, rows: int) -> Tensor | None:
        """The minibatch's [rows, ...] tensor from every rank's [share, ...] part (None stays None)."""
        if tensor is None:
            return None
        bounds = shares(rows, self.size)
        largest = max(hi - lo for lo, hi in bounds)
        local = tensor.detach()
        padded = local.new_zeros((largest, *local.shape[1:]))
        padded[: local.shape[0]] = local
        device = collective_device()
        parts = [torch.empty_like(padded, device=device) for _ in range(self.size)]
        torch.distributed.all_gather(parts, padded.to(device))
        return torch.cat([part[: hi - lo] for part, (lo, hi) in zip(parts, bounds)]).to(tensor.device)

    def whole(self, value: Tensor) -> Tensor:
        return full(value)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """A sharded entry (no collective): the state's tensors go to the checkpoint's shards folder
        (:meth:`write_shards`), each rank its own piece."""
        from asyncrl.training.sharded_state import shard_entry

        return shard_entry(optimizer)

    def write_shards(self, optimizer: torch.optim.Optimizer, checkpoint: Path) -> None:
        """This rank's piece of the optimizer state into the checkpoint folder's shards folder (a
        collective, with DCP)."""
        from asyncrl.training.sharded_state import SHARDS, save_shards

        save_shards(optimizer, Path(checkpoint) / SHARDS)

    def shard_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        # a DTensor's numel() is its whole tensor's: the sum is every rank's shards together
        return sum(value.numel() * value.element_size() for per_param in optimizer.state_dict()["state"].values()
                   for value in per_param.values() if isinstance(value, Tensor))

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """A checkpoint's optimizer entry at this world size: a sharded one (any world size wrote it)
        through DCP, each rank reading its shard; a single-process one (the same on every rank) with
        each tensor cut to this rank's shard."""
        from asyncrl.training.sharded_state import is_sharded, load_shards

        if is_sharded(state):
            load_shards(optimizer, state, distributed=True)
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        local = dict(state)
        local["state"] = {index: {key: _like(value, params[int(index)]) for key, value in per_param.items()}
                          for index, per_param in state["state"].items()}
        optimizer.load_state_dict(local)


def full(value: Tensor) -> Tensor:
    """A DTensor's whole tensor (a collective); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value


def _like(value: Tensor, param: Tensor) -> Tensor:
    """``value`` (a whole per-parameter state tensor) sharded as ``param``; scalars (the step count) as they are."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor) and isinstance(value, Tensor) and value.shape == param.shape:
        return distribute_tensor(value.to(param.device), param.device_mesh, param.placements)
    return value

