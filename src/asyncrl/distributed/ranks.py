"""Rank 0 leads, the other ranks follow: the one training loop runs on rank 0 only.

Rank 0 opens the run (directory, batch source, evaluation, metrics, checkpoints) as a single process
would and trains a sharded copy of its model. Every call of the trainer that needs the other ranks
is announced to them first, as a command broadcast from rank 0:

    ("step", batch)   train the step's batch (each rank its share), then gather the whole weights
    ("save", folder)  write this rank's shard of the optimizer state into a checkpoint folder
    ("load", state)   load a checkpoint's trainer state (a sharded one: each rank reads its shard)
    ("done", None)    the run is over

so the others execute the same collectives in the same order, and need no run directory or source
of their own. A SIGTERM is rank 0's to act on (it checkpoints, then ends the others with "done").
After each step rank 0 copies the gathered weights into its unsharded model, which generation,
evaluation, weight publishing and checkpoints read as they do in one process.

The others wait for each command outside the broadcast, on rank 0's announcement in torchrun's
store, for as long as rank 0's heartbeat goes on; rank 0 waits for them to load the model the same
way (asyncrl.distributed.liveness). A rank that stops answering ends the job within
``trainer.fsdp.timeout_s`` instead of hanging it.
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
from asyncrl.distributed.liveness import Peers
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

    def __init__(self, cfg, replica: torch.nn.Module, policy_dir: Path | None, peers: Peers, reference=None):
        self.world, self.peers = peers.world, peers
        self._send({"policy_dir": None if policy_dir is None else str(policy_dir)})
        for rank in range(1, self.world.size):  # loading the model may take the others minutes
            peers.wait_for(loaded_key(rank), [rank])
        self.trainer = sharded_trainer(cfg, copy.deepcopy(replica), self.world, reference)
        self.model = replica

    def __getattr__(self, name: str):
        return getattr(self.__dict__["trainer"], name)

    def _send(self, command) -> None:
        self.peers.announce()
        broadcast_object(command, self.world)

    def step(self, batch) -> dict[str, float]:
        self._send(("step", batch))
        stats = self.trainer.step(batch)
        copy_into(self.model, full_state(self.trainer.model))
        return stats

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
    trainer = sharded_trainer(cfg, model, world, reference)
    while True:
        command, payload = _receive(peers)
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
