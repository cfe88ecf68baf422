"""One rank of a gloo world of two running the real leader/follower pair (asyncrl.runtime.ranks),
as ``python replica_case.py RANK DIR``: rank 0 builds a LeaderTrainer on DIR/policy with
``rollout.dtype=bfloat16`` and fp32 master weights, trains one step of DIR/input.pt's batch, and
writes to DIR/replica.pt what its replica and the gathers looked like; rank 1 follows.

Every whole tensor that :mod:`asyncrl.training.fsdp` gathers is recorded (its dtype, and how many
earlier ones were still alive when it was gathered), so the test sees that no rank ever holds the
whole model gathered at once."""

import sys
import weakref
from pathlib import Path

import torch
from rendezvous import close_group, init_group

import asyncrl.training.fsdp as fsdp
from asyncrl.config import load_config
from asyncrl.runtime import ranks
from asyncrl.distributed.world import World


class Gathers:
    """A stand-in for fsdp.full that records each whole tensor it returns."""

    def __init__(self, full):
        self.full, self.alive, self.most_alive, self.dtypes = full, [], 0, []

    def __call__(self, value):
        self.alive = [ref for ref in self.alive if ref() is not None]
        self.most_alive = max(self.most_alive, len(self.alive))
        whole = self.full(value)
        self.alive.append(weakref.ref(whole))
        self.dtypes.append(str(whole.dtype))
        return whole


class LocalPeers:
    """Peers without heartbeats: the collectives themselves keep the two ranks in step."""

    def __init__(self, world: World):
        self.world = world

    def announce(self) -> None:
        pass

    def await_command(self) -> None:
        pass

    def wait_for(self, key: str, ranks: list[int]) -> None:
        pass

    def post(self, key: str) -> None:
        pass

    def stop_signalled(self, *args) -> None:
        pass


def main(rank: int, out: Path) -> None:
    init_group("gloo", rank, 2)
    world = World(rank, 2, rank)
    cfg = load_config(None, ["rollout.dtype=bfloat16", "policy.device=cpu", "trainer.fsdp.param_dtype=none",
                             "trainer.n_minibatches=2"])
    gathers = Gathers(fsdp.full)
    fsdp.full = gathers
    peers = LocalPeers(world)
    if rank != 0:
        ranks.follow(cfg, peers)
        close_group()
        return
    from asyncrl.policy.model import load_policy_for

    model, _ = load_policy_for(cfg.policy, out / "policy")
    batch = torch.load(out / "input.pt", weights_only=False)
    leader = ranks.LeaderTrainer(cfg, model, out / "policy", peers)
    before = {name: p.detach().clone() for name, p in leader.model.named_parameters()}
    leader.step(batch)
    step_gathers = (gathers.most_alive, sorted(set(gathers.dtypes)), len(gathers.dtypes))
    gathers.most_alive, gathers.dtypes = 0, []
    master = leader.master_weights()
    result = {"replica": {name: p.detach().clone() for name, p in leader.model.named_parameters()},
              "replica_state_keys": sorted(leader.model.state_dict()), "before": before, "master": master,
              "step_gathers": step_gathers,
              "master_gathers": (gathers.most_alive, sorted(set(gathers.dtypes)), len(gathers.dtypes)),
              "n_params": len(before)}
    torch.save(result, out / "replica.pt")
    leader.close()
    close_group()


if __name__ == "__main__":
    main(int(sys.argv[1]), Path(sys.argv[2]))
