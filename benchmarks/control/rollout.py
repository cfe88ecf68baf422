"""Collect one rollout: every actor steps its env ``num_steps`` times with its own behaviour policy.

Actors that were handed the same policy version are batched into one forward pass. The behaviour
log-prob log μ(a|s) of every sampled action is recorded with it, as an inference engine would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.control.envs import finished_episodes

if TYPE_CHECKING:  # gymnasium is the optional `control` extra (benchmarks.control.extra)
    import gymnasium as gym


@dataclass
class Rollout:
    """One synchronous rollout, time-major. T = num_steps, E = num_envs (actors).

    obs: [T, E, obs_dim] float32 observation before step t. actions: [T, E] int64 or [T, E, A] float32.
    behav_logp: [T, E] float32 log μ(a_t|s_t) under the actor's policy. rewards: [T, E] float32 (as the
    env wrappers return them, normalised if enabled). dones: [T, E] bool, the episode ended with step t
    (terminated or truncated: like CleanRL, no bootstrap through a time limit). versions: [E] int64
    policy version each actor used. next_obs: [E, obs_dim] observation after the last step.
    episode_returns / episode_lengths: raw return and length of every episode that ended.
    """

    obs: Tensor
    actions: Tensor
    behav_logp: Tensor
    rewards: Tensor
    dones: Tensor
    versions: Tensor
    next_obs: Tensor
    episode_returns: list[float] = field(default_factory=list)
    episode_lengths: list[int] = field(default_factory=list)


@torch.no_grad()
def _act(policies: dict[int, nn.Module], groups: dict[int, Tensor], obs: Tensor) -> tuple[Tensor, Tensor]:
    """Each group of actors samples from its own policy. Returns (actions [E, ...], logp [E])."""
    parts = {v: policies[v].act(obs[idx]) for v, idx in groups.items()}
    first_action = next(iter(parts.values()))[0]
    actions = torch.empty((obs.shape[0], *first_action.shape[1:]), dtype=first_action.dtype)
    logp = torch.empty(obs.shape[0])
    for v, idx in groups.items():
        actions[idx], logp[idx] = parts[v]
    return actions, logp


def collect(envs: gym.vector.VectorEnv, obs: Tensor, policies: dict[int, nn.Module],
            assignment: list[int], num_steps: int) -> Rollout:
    """Step ``envs`` num_steps times from ``obs`` [E, obs_dim]; actor e acts with policies[assignment[e]]."""
    versions = torch.tensor(assignment, dtype=torch.int64)
    groups = {v: torch.nonzero(versions == v).squeeze(-1) for v in policies}
    steps: dict[str, list[Tensor]] = {k: [] for k in ("obs", "actions", "behav_logp", "rewards", "dones")}
    returns: list[float] = []
    lengths: list[int] = []
    for _ in range(num_steps):
        actions, logp = _act(policies, groups, obs)
        next_obs, reward, terminated, truncated, infos = envs.step(actions.numpy())
        for key, value in (("obs", obs), ("actions", actions), ("behav_logp", logp),
                           ("rewards", torch.as_tensor(reward, dtype=torch.float32)),
                           ("dones", torch.as_tensor(np.logical_or(terminated, truncated)))):
            steps[key].append(value)
        ep_r, ep_l = finished_episodes(infos)
        returns += ep_r
        lengths += ep_l
        obs = torch.as_tensor(next_obs, dtype=torch.float32)
    return Rollout(**{k: torch.stack(v) for k, v in steps.items()}, versions=versions, next_obs=obs,
                   episode_returns=returns, episode_lengths=lengths)
