"""One Learner.step of a fixed model and batch, in one process or as one rank of a world of FSDP2
ranks: run here by the test (one process, unsharded) and as ``python dp_case.py RANK DIR CASE MICRO
N_MINIBATCHES [WORLD [DEVICE]]`` by each rank (gloo on the CPU, NCCL on CUDA; WORLD 2 and the CPU by
default). Writes rank 0's gradients (each update's, before the optimizer step), weights after the
step and statistics to DIR/<name>.pt, on the CPU."""

import copy
import sys
from pathlib import Path

import torch

from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.training.reference import ReferencePolicy
from asyncrl.training.trainer import Learner

CASES = {
    "a3po": (LossConfig(name="decoupled"), {"prox": "loglinear", "prox_error": True}, 0.0),
    "recompute": (LossConfig(name="decoupled"), {"prox": "recompute"}, 0.0),
    "gspo_kl": (LossConfig(name="gspo", params={"agg": "seq_mean_token_mean"}), {"prox": "none"}, 0.5),
}


def run_case(model, batch, case: str, micro: int, n_minibatches: int, parallel=None, shard=None):
    """(stats, {name: weight after the step}, [[grad per parameter] per update]) of one step."""
    loss, cfg, kl = CASES[case]
    reference = None
    if kl:
        reference = ReferencePolicy(copy.deepcopy(model))
        with torch.no_grad():  # a reference away from the policy: a non-zero penalty gradient
            for param in reference.model.parameters():
                param.add_(0.01 * torch.randn(param.shape, generator=torch.Generator().manual_seed(3)))
    trained = model if shard is None else shard(model)
    trainer = Learner(trained, TrainerConfig(n_minibatches=n_minibatches, lr=1e-3, micro_batch_size=micro,
                                             kl_coef=kl, grad_clip=1e9, **cfg),
                      loss, reference=reference, seed=5, parallel=parallel)
    trainer.version = 2
    trainer.optimizer.param_groups[0]["eps"] = 1e-3  # see tests/foundation/test_micro_batches.py
    from asyncrl.training.data_parallel import full

    grads = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: grads.append([full(p.grad).clone() for p in trained.parameters() if p.grad is not None]))
    stats = trainer.step(batch)
    weights = {name.removeprefix("policy."): full(p.detach()).clone() for name, p in trained.named_parameters()}
    return stats, weights, grads


def main(rank: int, out: Path, case: str, micro: int, n_minibatches: int, world_size: int = 2,
         device: str = "cpu") -> None:
    from asyncrl.distributed.config import FsdpConfig
    from asyncrl.training.data_parallel import DataParallel
    from asyncrl.training.fsdp import shard_model
    from asyncrl.distributed.world import World
    from rendezvous import close_group, init_group

    if device == "cuda":
        torch.cuda.set_device(rank)
    init_group("nccl" if device == "cuda" else "gloo", rank, world_size)
    world = World(rank, world_size, rank)
    model, batch = torch.load(out / "input.pt", weights_only=False)
    stats, weights, grads = run_case(model.to(device), batch.to(device), case, micro, n_minibatches,
                                     parallel=DataParallel(world),
                                     shard=lambda m: shard_model(m, world, FsdpConfig()))
    if rank == 0:
        cpu = {name: w.cpu() for name, w in weights.items()}, [[g.cpu() for g in update] for update in grads]
        torch.save((stats, *cpu), out / f"{case}-{micro}-{n_minibatches}.pt")
    close_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
         *([int(sys.argv[6])] if len(sys.argv) > 6 else []), *sys.argv[7:8])
