"""Staleness-bounded rollout buffer: admission control, drop-stale at consumption, oldest-first or
recency-weighted sampling. Pure bookkeeping (stdlib + tensors), so it is tested with a fake clock.

Admission (docs/runtime.md, after AReaL's ``StalenessManager``): with K = ``max_staleness``,
B = samples per training batch and V = the trainer's current version, a rollout of n samples may
start only while

    started + n ≤ (K + V + 1) · B,     started = accepted + running − (dropped + lost)

so at most K + 1 batches' worth of samples exist beyond what the trainer has consumed: no sample
can be generated from weights more than K versions older than the batch that will consume it,
except when a slow rollout is overtaken (interrupted generation then still tags each token with
its exact version, and drop-at-consumption enforces the bound).

Look-ahead window: when generation is faster than training, the rule above lets the generator run
the full K batches ahead, so every batch arrives exactly K versions stale although one batch of
look-ahead already keeps the trainer busy. ``max_ahead`` = W ≤ K replaces K in the admission rule
(not in the drop bound): data are then about W versions stale, the trainer still never waits as long
as W ≥ 1 and a batch is generated faster than it is trained, and K still bounds any overtaken rollout.

Consumption: a group whose oldest trained token is more than K versions behind V is dropped
(all its samples; GRPO advantages need the whole group) and counted. Staleness is measured at
consumption time, so time spent waiting in the queue counts.
"""

from __future__ import annotations

import random
import time
from collections import deque
from dataclasses import dataclass, field, fields

import torch

from asyncrl.types import Batch


@dataclass
class Group:
    """The scored samples of one prompt (a Batch of n rows) plus bookkeeping."""

    batch: Batch
    enqueued_at: float = field(default_factory=time.monotonic)

    @property
    def n(self) -> int:
        """Its samples: episodes, which are rows unless a history forked (``Batch.episode_ids``)."""
        return self.batch.episodes

    @property
    def oldest_version(self) -> int:
        v = self.batch.versions[self.batch.completion_mask]
        return int(v.min()) if v.numel() else 1 << 62

    @property
    def newest_version(self) -> int:
        v = self.batch.versions[self.batch.completion_mask]
        return int(v.max()) if v.numel() else -1


def concat_groups(groups: list[Group], pad_id: int) -> Batch:
    """Stack groups into one Batch, re-padding prompts (left) and completions (right), in group-id
    order as sync stacks its batch: which group's environments answered first must not change the
    order of the update's floating-point sums (async K = 0 equals sync bit for bit)."""
    groups = sorted(groups, key=lambda g: int(g.batch.group_ids[0]))
    p_width = max(g.batch.prompt_ids.shape[1] for g in groups)
    c_width = max(g.batch.completion_ids.shape[1] for g in groups)

    def pad(t: torch.Tensor, width: int, value, left: bool) -> torch.Tensor:
        extra = width - t.shape[1]
        if extra == 0:
            return t
        filler = torch.full((t.shape[0], extra), value, dtype=t.dtype)
        return torch.cat([filler, t] if left else [t, filler], dim=1)

    parts = {
        "prompt_ids": [pad(g.batch.prompt_ids, p_width, pad_id, True) for g in groups],
        "prompt_mask": [pad(g.batch.prompt_mask, p_width, False, True) for g in groups],
        "completion_ids": [pad(g.batch.completion_ids, c_width, pad_id, False) for g in groups],
        "behav_logp": [pad(g.batch.behav_logp, c_width, 0.0, False) for g in groups],
        "versions": [pad(g.batch.versions, c_width, -1, False) for g in groups],
        "completion_mask": [pad(g.batch.completion_mask, c_width, False, False) for g in groups],
        "rewards": [g.batch.rewards for g in groups],
        "group_ids": [g.batch.group_ids for g in groups],
        "advantages": [g.batch.advantages for g in groups],
    }
    if any(g.batch.observation_mask is not None for g in groups):  # episodes: observations attended, not trained
        parts["observation_mask"] = [
            pad(g.batch.observation_mask if g.batch.observation_mask is not None
                else torch.zeros_like(g.batch.completion_mask), c_width, False, False) for g in groups]
    if any(g.batch.episode_ids is not None for g in groups):  # forked histories: rows of one episode
        parts["episode_ids"] = [g.batch.episode_ids if g.batch.episode_ids is not None
                                else torch.arange(len(g.batch)) for g in groups]
    for name in ("reward_parts", "reward_failed"):  # [B, F] each, kept when every group has them alike
        columns = [getattr(g.batch, name) for g in groups]
        if all(c is not None for c in columns) and len({c.shape[1] for c in columns}) == 1:
            parts[name] = columns
    return Batch(**{k: torch.cat(v, dim=0) for k, v in parts.items()})


class StalenessBuffer:
    """Holds finished groups; decides admission; hands out batches of ``groups_per_batch`` groups."""

    def __init__(self, max_staleness: int, groups_per_batch: int, samples_per_group: int, *,
                 recency_decay: float = 1.0, seed: int = 0, max_ahead: int | None = None):
        if max_staleness < 0:
            raise ValueError("max_staleness: must be >= 0")
        if max_ahead is not None and max_ahead < 0:
            raise ValueError("max_ahead: must be >= 0")
        if not 0 < recency_decay <= 1:
            raise ValueError("recency_decay: must be in (0, 1]")
        self.max_staleness = max_staleness
        # batches the generator may start beyond the one the trainer takes next (None = K, AReaL's
        # rule). When generation outpaces training, data arrive exactly this many versions stale.
        self.window = max_staleness if max_ahead is None else min(max_ahead, max_staleness)
        self.groups_per_batch = groups_per_batch
        self.samples_per_group = samples_per_group
        self.recency_decay = recency_decay
        self.rng = random.Random(seed)
        self.groups: deque[Group] = deque()
        self.started = 0  # samples admitted, minus those dropped or lost
        self.dropped = 0  # samples dropped at consumption for staleness (cumulative)
        self.lost = 0  # samples whose rollout died with its worker (cumulative)
        self.dropped_groups: list[int] = []  # group ids dropped since the ledger last took them

    @property
    def batch_samples(self) -> int:
        return self.groups_per_batch * self.samples_per_group

    def capacity(self, version: int) -> int:
        """Samples that may still start at trainer version ``version``."""
        return (self.window + version + 1) * self.batch_samples - self.started

    def try_admit(self, n_samples: int, version: int) -> bool:
        if n_samples > self.capacity(version):
            return False
        self.started += n_samples
        return True

    def add(self, group: Group) -> None:
        self.groups.append(group)

    def mark_lost(self, n_samples: int) -> None:
        """A rollout that was admitted will never arrive (its worker died): free its capacity."""
        self.started -= n_samples
        self.lost += n_samples

    def mark_failed(self, group_ids: list[int], n_samples: int) -> None:
        """Groups that were admitted and will never arrive (an episode of theirs failed): free
        their capacity and name them for the ledger."""
        self.started -= n_samples
        self.lost += n_samples
        self.dropped_groups += list(group_ids)

    def drop_stale(self, version: int, bound: int | None = None) -> int:
        """Remove groups with a token more than ``bound`` (default K) versions behind ``version``;
        returns the samples dropped. A hard sync passes ``bound=0``."""
        bound = self.max_staleness if bound is None else bound
        keep, dropped = deque(), 0
        for g in self.groups:
            if version - g.oldest_version > bound:
                dropped += g.n
                self.dropped_groups += g.batch.group_ids.unique().tolist()
            else:
                keep.append(g)
        self.groups = keep
        self.dropped += dropped
        self.started -= dropped
        return dropped

    def ready(self, version: int, bound: int | None = None) -> bool:
        self.drop_stale(version, bound)
        return len(self.groups) >= self.groups_per_batch

    def take(self, version: int, bound: int | None = None) -> list[Group]:
        """``groups_per_batch`` groups: oldest first, or recency-weighted without replacement.

        Oldest first means by the version of a group's oldest trained token, arrival order among
        equals: a long episode that started many versions ago arrives late, and taking by arrival
        would leave it queued behind fresher groups until it is too stale to train (dropped); taken
        first, it is trained while within the bound. For single completions arrival order and age
        mostly agree."""
        if not self.ready(version, bound):
            raise RuntimeError("take: not enough fresh groups; call ready() first")
        if self.recency_decay == 1.0:
            order = sorted(range(len(self.groups)), key=lambda i: self.groups[i].oldest_version)
            chosen = set(order[: self.groups_per_batch])
            taken = [self.groups[i] for i in order[: self.groups_per_batch]]
            self.groups = deque(g for i, g in enumerate(self.groups) if i not in chosen)
            return taken
        chosen = []
        for _ in range(self.groups_per_batch):
            weights = [self.recency_decay ** (version - g.newest_version) for g in self.groups]
            index = self.rng.choices(range(len(self.groups)), weights=weights)[0]
            chosen.append(self.groups[index])
            del self.groups[index]
        return chosen

    def __len__(self) -> int:
        return sum(g.n for g in self.groups)

    def state_dict(self) -> dict:
        """Counters, sampling RNG and every held group (its tensors, versions included)."""
        return {"started": self.started, "dropped": self.dropped, "lost": self.lost, "rng": self.rng.getstate(),
                "window": self.window,
                "dropped_groups": list(self.dropped_groups),
                "groups": [{f.name: getattr(g.batch, f.name) for f in fields(g.batch)} for g in self.groups]}

    def load_state_dict(self, state: dict) -> None:
        self.started, self.dropped, self.lost = int(state["started"]), int(state["dropped"]), int(state["lost"])
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.dropped_groups = list(state["dropped_groups"])
        self.window = int(state.get("window", self.window))
        self.groups = deque(Group(Batch(**tensors)) for tensors in state["groups"])
