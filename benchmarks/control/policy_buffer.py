"""Simulated asynchrony: which policy each actor acts with.

The paper's setup: after every update the learner's weights are saved into a policy buffer of fixed
capacity N (oldest evicted first); before each rollout every actor is handed a policy drawn from the
buffer at random. N = 1 keeps only the current policy: synchronous on-policy training. Sampling stays
synchronous and every actor collects the same number of steps, so the runs are reproducible.

Three actor pools share one interface (``publish`` the learner's new version, ``behaviour`` hands out
one policy per actor), picked from ``ACTOR_POOLS`` by ``buffer_mode``:
  random  the paper's mixture: each actor draws a snapshot uniformly from the buffer, per rollout
  lag     fixed lag: every actor uses the oldest snapshot (N − 1 updates old once the buffer is full)
  live    no buffer: actors act with the learner module itself (reference on-policy PPO)
"""

from __future__ import annotations

import copy
from collections import OrderedDict

import numpy as np
import torch
from torch import Tensor, nn


class PolicyBuffer:
    """The last ``capacity`` policy snapshots, keyed by version (the learner's update count)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"buffer_capacity={capacity}: must be >= 1")
        self.capacity = capacity
        self._snapshots: OrderedDict[int, dict[str, Tensor]] = OrderedDict()

    def push(self, version: int, state: dict[str, Tensor]) -> None:
        """Store a deep copy of ``state``; evicts the oldest snapshot beyond capacity."""
        self._snapshots[version] = {k: v.detach().clone() for k, v in state.items()}
        while len(self._snapshots) > self.capacity:
            self._snapshots.popitem(last=False)

    @property
    def versions(self) -> list[int]:
        """Stored versions, oldest first."""
        return list(self._snapshots)

    def state(self, version: int) -> dict[str, Tensor]:
        return self._snapshots[version]


class BufferedActors:
    """Actors act with snapshots from a PolicyBuffer; ``draw`` picks each actor's version."""

    def __init__(self, capacity: int, seed: int, draw: str) -> None:
        self.buffer = PolicyBuffer(capacity)
        self._rng = np.random.default_rng(seed)  # own stream: torch's RNG stays the learner's
        self._draw = DRAWS[draw]
        self._modules: dict[int, nn.Module] = {}

    def publish(self, version: int, learner: nn.Module) -> None:
        self.buffer.push(version, learner.state_dict())
        self._modules = {v: m for v, m in self._modules.items() if v in self.buffer.versions}

    def assign(self, n_actors: int) -> list[int]:
        """The version each actor acts with in the next rollout."""
        return self._draw(self.buffer.versions, n_actors, self._rng)

    def behaviour(self, learner: nn.Module, n_actors: int) -> tuple[dict[int, nn.Module], list[int]]:
        """({version: module}, per-actor version) for one rollout; modules are frozen copies."""
        assignment = self.assign(n_actors)
        for version in set(assignment) - set(self._modules):
            module = copy.deepcopy(learner)
            module.load_state_dict(self.buffer.state(version))
            module.requires_grad_(False)
            self._modules[version] = module
        return {v: self._modules[v] for v in sorted(set(assignment))}, assignment


class LiveActors:
    """No buffer: every actor acts with the learner itself (on-policy PPO exactly as CleanRL runs it)."""

    def __init__(self, capacity: int, seed: int) -> None:
        self._version = 0

    def publish(self, version: int, learner: nn.Module) -> None:
        self._version = version

    def behaviour(self, learner: nn.Module, n_actors: int) -> tuple[dict[int, nn.Module], list[int]]:
        return {self._version: learner}, [self._version] * n_actors


def _draw_uniform(versions: list[int], n: int, rng: np.random.Generator) -> list[int]:
    return [versions[i] for i in rng.integers(0, len(versions), size=n)]


def _oldest(versions: list[int], n: int, rng: np.random.Generator) -> list[int]:
    return [versions[0]] * n


DRAWS = {"random": _draw_uniform, "lag": _oldest}
ACTOR_POOLS = {
    "random": lambda capacity, seed: BufferedActors(capacity, seed, "random"),
    "lag": lambda capacity, seed: BufferedActors(capacity, seed, "lag"),
    "live": LiveActors,
}


@torch.no_grad()
def snapshot_equal(a: nn.Module, b: nn.Module) -> bool:
    """True when two modules hold bitwise equal parameters and buffers (for tests and checks)."""
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
