"""How the trainer's minibatch updates are shared among processes: the trainer's one seam for it.

Every rank holds the whole step's batch (the leader broadcasts it), computes the advantages of all
of it and draws the same minibatch permutation, so group baselines and the minibatches are the same
as in one process. Each minibatch's rows are then split over the ranks in contiguous shares, which
each rank trains in micro-batches: exactly what ``trainer.micro_batch_size`` does in one process,
so a loss that splits exactly into micro-batches (``MICRO_BATCH_EXACT_LOSSES``) splits exactly over
ranks. Each rank's loss is its share of the minibatch's mean (the minibatch's token and sequence
counts are passed in), times the world size, because FSDP averages the ranks' gradients: the sum of
the shares' gradients is the minibatch's gradient.

Collectives must match across ranks: every rank runs the same number of forward and backward passes
per update (a rank with fewer rows than micro-batches runs a stand-in row whose loss is multiplied
by zero), agrees on whether the update is skipped (one all-reduce), and gathers the minibatch's
log-probs so that the logged statistics, the ESS and VCPO's learning-rate scale are those of the
whole minibatch on every rank.

:class:`SingleProcess` is the default (one process trains every row); :class:`DataParallel` is the
torchrun case.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from torch import Tensor

from asyncrl.distributed.world import World, collective_device


def shares(rows: int, size: int) -> list[tuple[int, int]]:
    """[(lo, hi)] contiguous row ranges of ``rows`` for ranks 0..size-1, sizes differing by at most one."""
    base, extra = divmod(rows, size)
    bounds, lo = [], 0
    for rank in range(size):
        hi = lo + base + (1 if rank < extra else 0)
        bounds.append((lo, hi))
        lo = hi
    return bounds


class SingleProcess:
    """One process trains every row of every minibatch."""

    size = 1
    split = False  # the minibatch is not shared: its statistics need no gathering
    loss_scale = 1.0

    def plan(self, rows: int, micro_batch_size: int) -> tuple[int, list[tuple[int, int]]]:
        """(first row of this process's share, [(lo, hi)] micro-batch ranges within the share)."""
        from asyncrl.training.steps import micro_bounds

        return 0, micro_bounds(rows, micro_batch_size)

    def all_finite(self, finite: bool) -> bool:
        return finite

    def gather_rows(self, tensor: Tensor | None, rows: int) -> Tensor | None:
        return tensor

    def norm(self, value: Tensor) -> Tensor:
        return value

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
        from asyncrl.distributed.sharded_state import is_sharded, load_shards

        if is_sharded(state):
            load_shards(optimizer, state, distributed=False)
        else:
            optimizer.load_state_dict(state)


class DataParallel(SingleProcess):
    """``world.size`` ranks, each training its share of every minibatch on an FSDP2-sharded model.
    A run shards only with two ranks or more; a world of one is the tests' check that the sharded
    path itself changes nothing (and runs on one GPU)."""

    split = True

    def __init__(self, world: World):
        self.world = world
        self.size = world.size
        self.loss_scale = float(world.size)  # FSDP divides the summed gradient by the world size

    def plan(self, rows: int, micro_batch_size: int) -> tuple[int, list[tuple[int, int]]]:
        lo, hi = shares(rows, self.size)[self.world.rank]
        if rows < self.size:
            raise ValueError(f"trainer: a minibatch of {rows} rows cannot be shared by {self.size} ranks "
                             "(fewer trainer.n_minibatches, or a larger batch)")
        largest = math.ceil(rows / self.size)
        n_micro = 1 if micro_batch_size <= 0 else math.ceil(largest / micro_batch_size)
        return lo, shares(hi - lo, n_micro)  # empty ranges when the share has fewer rows than n_micro

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

    def norm(self, value: Tensor) -> Tensor:
        return full(value)

    def optimizer_state(self, optimizer: torch.optim.Optimizer) -> dict:
        """A sharded entry (no collective): the state's tensors go to the checkpoint's shards folder
        (:meth:`write_shards`), each rank its own piece."""
        from asyncrl.distributed.sharded_state import shard_entry

        return shard_entry(optimizer)

    def write_shards(self, optimizer: torch.optim.Optimizer, checkpoint: Path) -> None:
        """This rank's piece of the optimizer state into the checkpoint folder's shards folder (a
        collective, with DCP)."""
        from asyncrl.distributed.sharded_state import SHARDS, save_shards

        save_shards(optimizer, Path(checkpoint) / SHARDS)

    def shard_bytes(self, optimizer: torch.optim.Optimizer) -> int:
        # a DTensor's numel() is its whole tensor's: the sum is every rank's shards together
        return sum(value.numel() * value.element_size() for per_param in optimizer.state_dict()["state"].values()
                   for value in per_param.values() if isinstance(value, Tensor))

    def load_optimizer_state(self, optimizer: torch.optim.Optimizer, state: dict) -> None:
        """A checkpoint's optimizer entry at this world size: a sharded one (any world size wrote it)
        through DCP, each rank reading its shard; a single-process one (the same on every rank) with
        each tensor cut to this rank's shard."""
        from asyncrl.distributed.sharded_state import is_sharded, load_shards

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

