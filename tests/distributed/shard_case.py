"""One rank of a gloo world of two, run as ``python shard_case.py RANK DIR MODE`` by
tests/distributed/test_sharded_state.py:
- ``save``: shard the model of DIR/input.pt, train one A-3PO step, write the optimizer's shards into
  DIR/ckpt (each rank its piece) and, from rank 0, the trainer state's entry and the whole optimizer
  state gathered (DIR/saved.pt);
- ``load``: a fresh sharded trainer loads DIR/ckpt's shards (each rank reads its own) and rank 0
  writes the whole optimizer state gathered from them (DIR/loaded.pt)."""

import sys
from pathlib import Path

import torch
from rendezvous import close_group, init_group

from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.distributed.config import FsdpConfig
from asyncrl.distributed.world import World
from asyncrl.training.checkpoint import load_states
from asyncrl.training.data_parallel import DataParallel, full
from asyncrl.training.fsdp import shard_model
from asyncrl.training.trainer import Learner


def whole_state(trainer: Learner) -> dict:
    """The optimizer's state tensors, every one gathered whole: {param index: {name: tensor}}."""
    state = trainer.optimizer.state_dict()["state"]
    return {index: {key: full(value).clone() for key, value in per_param.items()} for index, per_param in state.items()}


def main(rank: int, out: Path, mode: str) -> None:
    init_group("gloo", rank, 2)
    world = World(rank, 2, rank)
    model, batch = torch.load(out / "input.pt", weights_only=False)
    trainer = Learner(shard_model(model, world, FsdpConfig()), TrainerConfig(n_minibatches=2, lr=1e-3),
                      LossConfig(name="decoupled"), seed=5, parallel=DataParallel(world))
    folder = out / "ckpt"
    if mode == "save":
        trainer.version = 2
        trainer.step(batch)
        if rank == 0:
            folder.mkdir()
        torch.distributed.barrier()
        trainer.write_shards(folder)
        entry, gathered = trainer.state_dict()["optimizer"], whole_state(trainer)
        if rank == 0:
            torch.save({"optimizer": entry}, folder / "trainer_state.pt")
            torch.save({}, folder / "run_state.pt")
            torch.save(gathered, out / "saved.pt")
    else:
        trainer.load_state_dict({**load_states(folder)[0], "version": 2, "rng": trainer.rng.get_state()})
        gathered = whole_state(trainer)
        if rank == 0:
            torch.save(gathered, out / "loaded.pt")
    close_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
