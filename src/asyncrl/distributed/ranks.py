"""Rank 0 leads, the other ranks follow: the one training loop runs on rank 0 only.

Rank 0 opens the run (directory, batch source, evaluation, metrics, checkpoints) as a single process
would and trains a sharded copy of its model. Every call of the trainer that needs the other ranks
is announced to them first, as a command broadcast from rank 0:

    ("step", batch)   train the step's batch (each rank its share), then gather the whole weights
    ("save", folder)  write this rank's shard of the optimizer state into a checkpoint folder
    ("load", state)   load a checkpoint's trainer state (a sharded one: each rank reads its shard)
    ("done", None)    the run is over

so the others execute the same collectives in the same order, and need no run directory, source or
signal handling of their own: a SIGTERM is rank 0's to act on (it checkpoints, then ends the others
with "done"). After each step rank 0 copies the gathered weights into its unsharded model, which
generation, evaluation, weight publishing and checkpoints read as they do in one process.
"""

from __future__ import annotations

import copy
import signal
import warnings
from pathlib import Path

import torch

from asyncrl.distributed.data_parallel import DataParallel
from asyncrl.distributed.fsdp import broadcast_parameters, copy_into, full_state, shard_model
from asyncrl.config.threads import trainer_threads
from asyncrl.distributed.world import World, broadcast_object, node_ranks


def sharded_trainer(cfg, model: torch.nn.Module, world: World, reference=None):
    """A Trainer of ``model`` (sharded in place) with this rank's data-parallel share."""
    from asyncrl.training.trainer import Trainer

    broadcast_parameters(model)
    return Trainer(shard_model(model, world, cfg.trainer.fsdp), cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed,
                   reference=reference, lm_head_fp32=cfg.policy.lm_head_fp32, parallel=DataParallel(world))


class LeaderTrainer:
    """Rank 0's trainer: a sharded Trainer whose collective calls are announced to the other ranks.
    ``model`` is the unsharded replica (generation, evaluation, publishing, checkpoints); every other
    attribute is the sharded trainer's."""

    def __init__(self, cfg, replica: torch.nn.Module, policy_dir: Path | None, world: World, reference=None):
        self.world = world
        broadcast_object({"policy_dir": None if policy_dir is None else str(policy_dir)}, world)
        self.trainer = sharded_trainer(cfg, copy.deepcopy(replica), world, reference)
        self.model = replica

    def __getattr__(self, name: str):
        return getattr(self.__dict__["trainer"], name)

    def step(self, batch) -> dict[str, float]:
        broadcast_object(("step", batch), self.world)
        stats = self.trainer.step(batch)
        copy_into(self.model, full_state(self.trainer.model))
        return stats

    def write_shards(self, checkpoint: Path) -> None:
        broadcast_object(("save", str(checkpoint)), self.world)
        self.trainer.write_shards(checkpoint)

    def load_state_dict(self, state: dict) -> None:
        broadcast_object(("load", state), self.world)
        self.trainer.load_state_dict(state)  # optimizer and counters only: the weights are already rank 0's

    def close(self) -> None:
        """The other ranks' run is over (call once, after the last collective)."""
        broadcast_object(("done", None), self.world)


def follow(cfg, world: World) -> None:
    """A rank other than 0: build the model from the starting weights rank 0 names, take rank 0's
    weights, and run the commands rank 0 broadcasts until "done"."""
    from asyncrl.policy.lora import apply_lora
    from asyncrl.policy.model import load_policy_for
    from asyncrl.training.reference import build_reference

    for signum in (signal.SIGTERM, signal.SIGINT):  # rank 0 decides when to stop, and checkpoints first
        signal.signal(signum, signal.SIG_IGN)
    warnings.simplefilter("ignore")  # rank 0 says it once
    torch.set_num_threads(trainer_threads(cfg, ranks=node_ranks(world)))
    setup = broadcast_object(None, world)
    model, _ = load_policy_for(cfg.policy, Path(setup["policy_dir"]))
    model = apply_lora(model, cfg.policy)
    reference = build_reference(cfg, model, setup["policy_dir"])
    trainer = sharded_trainer(cfg, model, world, reference)
    while True:
        command, payload = broadcast_object(None, world)
        if command == "step":
            trainer.step(payload)
            full_state(trainer.model)
        elif command == "save":
            trainer.write_shards(Path(payload))
        elif command == "load":
            trainer.load_state_dict(payload)
        elif command == "done":
            return
        else:
            raise RuntimeError(f"rank {world.rank}: unknown command {command!r} from rank 0")
