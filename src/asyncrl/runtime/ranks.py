"""Rank 0 leads, the other ranks follow: the one training loop runs on rank 0 only.

Rank 0 opens the run (directory, batch source, evaluation, metrics, checkpoints) as a single process
would and trains a sharded copy of its model. Every call of the trainer that needs the other ranks
is announced to them first, as a command broadcast from rank 0:

    ("step", batch)   train the step's batch (each rank its share), then gather the weights for
                      rank 0's replica, one parameter at a time, in the replica's dtype
    ("weights", None) gather the fp32 master weights one parameter at a time (rank 0 writes them
                      into a checkpoint; the others keep nothing)
    ("save", folder)  write this rank's shard of the optimizer state into a checkpoint folder
    ("load", state)   load a checkpoint's trainer state (a sharded one: each rank reads its shard)
    ("done", None)    the run is over

so the others execute the same collectives in the same order, and need no run directory or source
of their own. A SIGTERM is rank 0's to act on (it checkpoints, then ends the others with "done").
Rank 0 shards the model it loaded (no copy of it) and keeps an unsharded replica of the policy in
the generation dtype (``rollout.dtype``, when lower than ``policy.dtype``: bf16 on the CUDA presets,
half the fp32 weights), which generation, evaluation and weight publishing read as they do in one
process; after each step the gathered weights stream into it parameter by parameter. The master
weights stay the fp32 shards: a checkpoint writes them (gathered one at a time into host memory), not
the replica, unless the replica holds the master dtype itself (then it is the same values).

The others wait for each command outside the broadcast, on rank 0's announcement in torchrun's
store, for as long as rank 0's heartbeat goes on; rank 0 waits for them to load the model the same
way (asyncrl.distributed.liveness). A rank that stops answering ends the job within
``trainer.fsdp.timeout_s`` instead of hanging it.
"""

from __future__ import annotations

import signal
import warnings
from pathlib import Path

import torch

from asyncrl.config.threads import trainer_threads
from asyncrl.distributed.liveness import Peers
from asyncrl.distributed.world import World, broadcast_object, node_ranks
from asyncrl.training.data_parallel import DataParallel
from asyncrl.training.fsdp import (broadcast_parameters, generation_replica, master_state, named_like, shard_model,
                                   stream_into)


def sharded_trainer(cfg, model: torch.nn.Module, world: World, reference=None):
    """A Learner of ``model`` (sharded in place) with this rank's data-parallel share."""
    from asyncrl.training.trainer import Learner

    broadcast_parameters(model)
    sharded = shard_model(model, world, cfg.trainer.fsdp, autocast=cfg.trainer.autocast)
    return Learner(sharded, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed,
                   reference=reference, lm_head_fp32=cfg.policy.lm_head_fp32, parallel=DataParallel(world))


def replica_dtype(cfg) -> torch.dtype:
    """The dtype of rank 0's replica: the generation dtype (``rollout.dtype``; ``auto``: the policy's),
    unless that is wider than the master weights' (the engines cast up from the master dtype)."""
    from asyncrl.policy.model import DTYPES

    master = DTYPES[cfg.policy.dtype]
    generation = master if cfg.rollout.dtype == "auto" else DTYPES[cfg.rollout.dtype]
    return generation if generation.itemsize <= master.itemsize else master


class LeaderTrainer:
    """Rank 0's trainer: a sharded Learner whose collective calls are announced to the other ranks.
    ``model`` is the unsharded replica in :func:`replica_dtype` (generation, evaluation, publishing);
    every other attribute is the sharded trainer's. ``model`` passed in is sharded in place: read the
    policy from ``self.model`` afterwards."""

    def __init__(self, cfg, model: torch.nn.Module, policy_dir: Path | None, peers: Peers, reference=None):
        self.world, self.peers = peers.world, peers
        self._send({"policy_dir": None if policy_dir is None else str(policy_dir)})
        for rank in range(1, self.world.size):  # loading the model may take the others minutes
            peers.wait_for(loaded_key(rank), [rank])
        self.dtype = replica_dtype(cfg)
        self.model = generation_replica(model, self.dtype)  # before sharding frees the whole weights
        self.trainer = sharded_trainer(cfg, model, self.world, reference)

    def __getattr__(self, name: str):
        return getattr(self.__dict__["trainer"], name)

    def _send(self, command) -> None:
        self.peers.announce()
        broadcast_object(command, self.world)

    def step(self, batch) -> dict[str, float]:
        self._send(("step", batch))
        stats = self.trainer.step(batch)
        stream_into(self.trainer.model, self.model, self.dtype)
        return stats

    def master_weights(self) -> dict[str, torch.Tensor] | None:
        """The weights a checkpoint writes, named as the replica's state dict: gathered from the shards
        in their dtype, in host memory (a collective); None when the replica holds that dtype (it
        has the same values)."""
        if next(self.trainer.model.parameters()).dtype == self.dtype:
            return None
        self._send(("weights", None))
        return named_like(self.model, master_state(self.trainer.model, keep=True))

    def write_shards(self, checkpoint: Path) -> None:
        self._send(("save", str(checkpoint)))
        self.trainer.write_shards(checkpoint)

    def load_state_dict(self, state: dict) -> None:
        self._send(("load", state))
        self.trainer.load_state_dict(state)  # optimizer and counters only: the weights are already rank 0's

    def close(self) -> None:
        """The other ranks' run is over (call once, after the last collective)."""
        self._send(("done", None))


def loaded_key(rank: int) -> str:
    return f"loaded/{rank}"


def _receive(peers: Peers):
    peers.await_command()
    return broadcast_object(None, peers.world)


def follow(cfg, peers: Peers) -> None:
    """A rank other than 0: build the model from the starting weights rank 0 names, take rank 0's
    weights, and run the commands rank 0 broadcasts until "done"."""
    from asyncrl.policy.lora import apply_lora
    from asyncrl.policy.model import load_policy_for
    from asyncrl.training.reference import build_reference

    world = peers.world
    for signum in (signal.SIGTERM, signal.SIGINT):  # rank 0 decides when to stop, and checkpoints first
        signal.signal(signum, peers.stop_signalled)
    warnings.simplefilter("ignore")  # rank 0 says it once
    torch.set_num_threads(trainer_threads(cfg, ranks=node_ranks(world)))
    setup = _receive(peers)
    model, _ = load_policy_for(cfg.policy, Path(setup["policy_dir"]))
    model = apply_lora(model, cfg.policy)
    reference = build_reference(cfg, model, setup["policy_dir"])
    peers.post(loaded_key(world.rank))
    trainer, dtype = sharded_trainer(cfg, model, world, reference), replica_dtype(cfg)
    while True:
        command, payload = _receive(peers)
        if command == "step":
            trainer.step(payload)
            stream_into(trainer.model, None, dtype)
        elif command == "weights":
            master_state(trainer.model, keep=False)
        elif command == "save":
            trainer.write_shards(Path(payload))
        elif command == "load":
            trainer.load_state_dict(payload)
        elif command == "done":
            return
        else:
            raise RuntimeError(f"rank {world.rank}: unknown command {command!r} from rank 0")
