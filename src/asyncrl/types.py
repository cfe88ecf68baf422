"""Data containers passed between rollout, buffer and trainer. Every [B, T] tensor is aligned with
the completion tokens: column t is the t-th generated token of the sequence (no shift)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch


def on_device(tensor: torch.Tensor, device: torch.device) -> bool:
    """Whether ``tensor`` lives on ``device`` ("cuda" matches any "cuda:i" of the current index)."""
    if tensor.device.type != device.type:
        return False
    return device.index is None or tensor.device.index == device.index


@dataclass
class Generation:
    """Raw output of a sampler.

    prompt_ids [B, P] long (left-padded), prompt_mask [B, P] bool,
    completion_ids [B, T] long (right-padded with pad id after eos),
    behav_logp [B, T] float32 (log-prob of each sampled token under the sampling distribution; 0 at pad),
    versions [B, T] long (weights version that produced each token; −1 at pad),
    completion_mask [B, T] bool (generated tokens, eos included): the loss mask, the tokens trained on,
    observation_mask [B, T] bool or None (multi-turn episodes: tokens the environment or a tool put
    in the completion, attended to and never trained on, version −1 and behav_logp 0; None = none).

    The loss mask is never the attention mask: a completion's attended tokens are
    :attr:`completion_attention`, the loss mask's tokens and the observations between them.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    behav_logp: torch.Tensor
    versions: torch.Tensor
    completion_mask: torch.Tensor
    observation_mask: torch.Tensor | None = field(default=None, kw_only=True)

    @property
    def completion_attention(self) -> torch.Tensor:
        """[B, T] bool: the completion tokens the model attends to (sampled and observed)."""
        if self.observation_mask is None:
            return self.completion_mask
        return self.completion_mask | self.observation_mask

    def to(self, device: torch.device | str, non_blocking: bool = False):
        """Every tensor field on ``device`` (the same object when already there): the one place a
        batch changes device, at the entrance of the component that consumes it."""
        device = torch.device(device)
        tensors = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}
        if all(on_device(t, device) for t in tensors.values()):
            return self
        return type(self)(**{k: t.to(device, non_blocking=non_blocking) for k, t in tensors.items()})


@dataclass
class Batch(Generation):
    """A scored training batch: a Generation plus

    rewards [B] float32 (total reward per sequence), group_ids [B] long (prompt id; samples of one
    prompt share it), advantages [B] float32 (filled by the trainer), reward_parts [B, F] float32 or
    None (the raw value of each of the F reward functions, NaN where one returned None, "does not
    apply", or failed and was zeroed), reward_failed [B, F] bool or None (True where that NaN is a
    failure); both for the per-function metrics only, the trainer never reads them;
    episode_ids [B] long or None (multi-turn episodes whose history forked into several rows: the
    episode each row belongs to, numbered within its group; rows of one episode share its reward and
    advantage, and the group baseline counts each episode once. None: one row per episode).
    """

    rewards: torch.Tensor
    group_ids: torch.Tensor
    advantages: torch.Tensor
    reward_parts: torch.Tensor | None = None
    reward_failed: torch.Tensor | None = None
    episode_ids: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.completion_ids.shape[0]

    @property
    def episodes(self) -> int:
        """Episodes (samples) the rows come from: ``len(self)`` unless histories forked."""
        if self.episode_ids is None:
            return len(self)
        return int(torch.unique(torch.stack([self.group_ids, self.episode_ids]), dim=1).shape[1])

    def select(self, index: torch.Tensor) -> "Batch":
        """Rows ``index`` of every tensor field."""
        return Batch(**{f.name: _rows_of(getattr(self, f.name), index) for f in fields(self)})

    def rows(self, start: int, stop: int) -> "Batch":
        """Rows ``start:stop`` of every tensor field, as views (no copy)."""
        return Batch(**{f.name: _rows_of(getattr(self, f.name), slice(start, stop)) for f in fields(self)})


def _rows_of(tensor: torch.Tensor | None, index) -> torch.Tensor | None:
    return None if tensor is None else tensor[index]


def batch_to_numpy(batch: Batch) -> dict:
    """Plain numpy arrays: pickled by value across processes. (torch's queue reduction shares
    tensors through the sender's file descriptors, which a killed sender takes with it.)"""
    return {f.name: getattr(batch, f.name).numpy() for f in fields(batch) if getattr(batch, f.name) is not None}


def batch_from_numpy(arrays: dict) -> Batch:
    return Batch(**{name: torch.from_numpy(array) for name, array in arrays.items()})
