"""The actor-critic network: separate tanh MLPs for policy and value (CleanRL's ``Agent``).

The action head is picked by the action space (a table, not a branch): a Categorical over logits for
``Discrete`` spaces, a diagonal Gaussian with a state-independent learned log-std for ``Box`` spaces.
Orthogonal init with CleanRL's gains (√2 hidden, 0.01 policy output, 1.0 value output).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn
from torch.distributions import Categorical, Distribution, Normal

if TYPE_CHECKING:  # gymnasium is the optional `control` extra (benchmarks.control.extra)
    import gymnasium as gym


def _layer(n_in: int, n_out: int, gain: float = math.sqrt(2)) -> nn.Linear:
    layer = nn.Linear(n_in, n_out)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, 0.0)
    return layer


def _mlp(n_in: int, hidden: int, n_out: int, out_gain: float) -> nn.Sequential:
    return nn.Sequential(_layer(n_in, hidden), nn.Tanh(), _layer(hidden, hidden), nn.Tanh(),
                         _layer(hidden, n_out, out_gain))


class CategoricalHead(nn.Module):
    """Discrete actions: the trunk outputs logits [N, n_actions]; actions are [N] int64."""

    def __init__(self, space: gym.spaces.Discrete) -> None:
        super().__init__()
        self.n_out = int(space.n)

    def distribution(self, trunk_out: Tensor) -> Distribution:
        return Categorical(logits=trunk_out)

    def log_prob(self, dist: Distribution, action: Tensor) -> Tensor:
        return dist.log_prob(action)

    def entropy(self, dist: Distribution) -> Tensor:
        return dist.entropy()


class GaussianHead(nn.Module):
    """Continuous actions: the trunk outputs means [N, A]; log-std [1, A] is a free parameter.
    Log-probs and entropies sum over the A action dimensions → [N]."""

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__()
        self.n_out = int(math.prod(space.shape))
        self.log_std = nn.Parameter(torch.zeros(1, self.n_out))

    def distribution(self, trunk_out: Tensor) -> Distribution:
        return Normal(trunk_out, self.log_std.expand_as(trunk_out).exp())

    def log_prob(self, dist: Distribution, action: Tensor) -> Tensor:
        return dist.log_prob(action).sum(-1)

    def entropy(self, dist: Distribution) -> Tensor:
        return dist.entropy().sum(-1)


# keyed by the space's class name (gymnasium's Discrete / Box), so the table needs no gymnasium import
HEADS: dict[str, type[nn.Module]] = {"Discrete": CategoricalHead, "Box": GaussianHead}


class Agent(nn.Module):
    """Policy π(a|s) and value V(s). obs: [N, obs_dim] float32."""

    def __init__(self, obs_space: gym.spaces.Box, action_space: gym.spaces.Space, hidden: int = 64) -> None:
        super().__init__()
        head = HEADS.get(type(action_space).__name__)
        if head is None:
            raise ValueError(f"action space {action_space}: only Discrete and Box are supported")
        obs_dim = int(math.prod(obs_space.shape))
        self.head = head(action_space)
        self.actor = _mlp(obs_dim, hidden, self.head.n_out, out_gain=0.01)
        self.critic = _mlp(obs_dim, hidden, 1, out_gain=1.0)

    def value(self, obs: Tensor) -> Tensor:
        """[N] float32 V(s)."""
        return self.critic(obs).squeeze(-1)

    def distribution(self, obs: Tensor) -> Distribution:
        return self.head.distribution(self.actor(obs))

    def act(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        """Sample a ~ π(·|s); returns (action, log π(a|s) [N])."""
        dist = self.distribution(obs)
        action = dist.sample()
        return action, self.head.log_prob(dist, action)

    def log_prob(self, obs: Tensor, action: Tensor) -> Tensor:
        """[N] log π(a|s) of given actions."""
        return self.head.log_prob(self.distribution(obs), action)

    def evaluate(self, obs: Tensor, action: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """(log π(a|s), entropy, V(s)), each [N], with gradients: what an update step needs."""
        dist = self.distribution(obs)
        return self.head.log_prob(dist, action), self.head.entropy(dist), self.value(obs)
