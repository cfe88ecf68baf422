"""PPO-family training for gymnasium vector envs under simulated asynchrony, top to bottom.

    for each iteration:
        publish the learner's weights as version `it` into the actor pool (policy buffer)
        every actor gets a behaviour policy from the pool, collects num_steps transitions
        the learner scores the batch (V(s), log π(a|s)) and estimates advantages (GAE or V-trace)
        update_epochs × num_minibatches gradient steps on
            policy_loss(arm.loss, log π, log μ, A)  [from asyncrl.objectives, transitions as a
                                                     [N, 1] "token" batch with an all-ones mask]
          + vf_coef · value loss − ent_coef · entropy

The policy-gradient term is always the objectives registry's; nothing here knows which arm runs.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from torch import Tensor, nn

from benchmarks.control.agent import Agent
from benchmarks.control.arms import ADVANTAGES, ARMS, AdvantageInputs, Arm
from benchmarks.control.config import ControlConfig
from benchmarks.control.envs import make_vector_env
from benchmarks.control.policy_buffer import ACTOR_POOLS
from benchmarks.control.rollout import Rollout, collect
from asyncrl.objectives import masked_whiten, policy_loss


@dataclass
class Batch:
    """A rollout flattened for minibatching; N = E × T, actor-major. Fields are [N] unless noted.

    obs [N, obs_dim], actions [N] or [N, A], behav_logp (log μ), old_values (V at update start, for
    value clipping), advantages, targets (value targets)."""

    obs: Tensor
    actions: Tensor
    behav_logp: Tensor
    old_values: Tensor
    advantages: Tensor
    targets: Tensor


@dataclass
class TrainResult:
    """The trained learner and one metrics dict per iteration (``history``)."""

    agent: Agent
    history: list[dict] = field(default_factory=list)


def _by_actor(x: Tensor) -> Tensor:
    """[T, E, ...] → [E, T, ...]: advantage estimators want one actor's time series per row."""
    return x.transpose(0, 1)


@torch.no_grad()
def estimate(agent: Agent, rollout: Rollout, arm: Arm, cfg: ControlConfig) -> tuple[Tensor, Tensor, Tensor]:
    """(advantages, value targets, values), each [E, T], with the learner as it is now."""
    obs = _by_actor(rollout.obs)
    e, t = obs.shape[:2]
    flat_obs = obs.reshape(e * t, -1)
    values = agent.value(flat_obs).reshape(e, t)
    learner_logp = agent.log_prob(flat_obs, _by_actor(rollout.actions).reshape(e * t, *rollout.actions.shape[2:]))
    dones = _by_actor(rollout.dones)
    inputs = AdvantageInputs(
        behav_logp=_by_actor(rollout.behav_logp), learner_logp=learner_logp.reshape(e, t),
        rewards=_by_actor(rollout.rewards), values=values, discounts=cfg.gamma * (~dones).float(),
        bootstrap_value=agent.value(rollout.next_obs), mask=torch.ones(e, t, dtype=torch.bool))
    advantages, targets = ADVANTAGES[arm.advantage](inputs, cfg)
    return advantages, targets, values


def _flatten(rollout: Rollout, advantages: Tensor, targets: Tensor, values: Tensor) -> Batch:
    def flat(x: Tensor) -> Tensor:
        return _by_actor(x).reshape(-1, *x.shape[2:])

    return Batch(obs=flat(rollout.obs), actions=flat(rollout.actions), behav_logp=flat(rollout.behav_logp),
                 old_values=values.reshape(-1), advantages=advantages.reshape(-1), targets=targets.reshape(-1))


def value_loss(new: Tensor, old: Tensor, target: Tensor, cfg: ControlConfig) -> Tensor:
    """½ (V − target)², or CleanRL's clipped form: ½ max((V − t)², (old + clip(V − old, ±ε) − t)²)."""
    unclipped = (new - target) ** 2
    if not cfg.clip_vloss:
        return 0.5 * unclipped.mean()
    clipped = old + (new - old).clamp(-cfg.clip_coef, cfg.clip_coef)
    return 0.5 * torch.maximum(unclipped, (clipped - target) ** 2).mean()


def minibatch_step(agent: Agent, optimizer: torch.optim.Optimizer, batch: Batch, idx: Tensor,
                   arm: Arm, cfg: ControlConfig) -> dict[str, float]:
    """One gradient step on the transitions ``idx``; returns the loss statistics."""
    logp, entropy, new_values = agent.evaluate(batch.obs[idx], batch.actions[idx])
    ones = torch.ones(idx.numel(), 1, dtype=torch.bool)
    adv = batch.advantages[idx].unsqueeze(1)
    if cfg.norm_adv:
        adv = masked_whiten(adv, ones)
    pg_loss, stats = policy_loss(arm.loss, logp.unsqueeze(1), batch.behav_logp[idx].unsqueeze(1), adv, ones,
                                 **arm.params(cfg))
    v_loss = value_loss(new_values, batch.old_values[idx], batch.targets[idx], cfg)
    loss = pg_loss - cfg.ent_coef * entropy.mean() + cfg.vf_coef * v_loss
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm)
    optimizer.step()
    return {"pg_loss": pg_loss.item(), "value_loss": v_loss.item(), "entropy": entropy.mean().item(),
            "tv": stats["tv"].item(), "approx_kl": stats["approx_kl_k3"].item(),
            "clipped_frac": stats["clipped_tokens"].item()}


def update(agent: Agent, optimizer: torch.optim.Optimizer, rollout: Rollout, arm: Arm, cfg: ControlConfig,
           generator: torch.Generator) -> dict[str, float]:
    """update_epochs passes (one for a single-pass arm) of shuffled minibatches over one rollout;
    returns mean statistics."""
    batch = _flatten(rollout, *estimate(agent, rollout, arm, cfg))
    mb_size = cfg.batch_size // cfg.num_minibatches
    stats: list[dict[str, float]] = []
    for _ in range(1 if arm.single_pass else cfg.update_epochs):
        order = torch.randperm(cfg.batch_size, generator=generator)
        for start in range(0, cfg.batch_size, mb_size):
            if arm.reestimate and stats:  # IMPALA: targets follow the learner, old values stay
                advantages, targets, _ = estimate(agent, rollout, arm, cfg)
                batch.advantages, batch.targets = advantages.reshape(-1), targets.reshape(-1)
            stats.append(minibatch_step(agent, optimizer, batch, order[start:start + mb_size], arm, cfg))
    return {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}


def train(cfg: ControlConfig, on_iteration: Callable[[dict], None] | None = None) -> TrainResult:
    """Run cfg.iterations collect-then-update rounds; ``on_iteration`` sees each metrics dict."""
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.torch_threads)
    arm = ARMS[cfg.arm]
    envs = make_vector_env(cfg)
    agent = Agent(envs.single_observation_space, envs.single_action_space, cfg.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5)
    actors = ACTOR_POOLS[cfg.buffer_mode](cfg.buffer_capacity, cfg.seed)
    shuffle = torch.Generator().manual_seed(cfg.seed)
    obs = torch.as_tensor(envs.reset(seed=cfg.seed)[0], dtype=torch.float32)
    result = TrainResult(agent)
    started = time.perf_counter()
    for it in range(cfg.iterations):
        if cfg.anneal_lr:
            optimizer.param_groups[0]["lr"] = cfg.lr * (1.0 - it / cfg.iterations)
        actors.publish(it, agent)
        policies, assignment = actors.behaviour(agent, cfg.num_envs)
        rollout = collect(envs, obs, policies, assignment, cfg.num_steps)
        obs = rollout.next_obs
        stats = update(agent, optimizer, rollout, arm, cfg, shuffle)
        returns = rollout.episode_returns
        metrics = {"iteration": it, "env_steps": (it + 1) * cfg.batch_size,
                   "episodic_return": float(np.mean(returns)) if returns else math.nan,
                   "episodes": len(returns), "policy_lag": float(it - rollout.versions.float().mean()),
                   "sps": (it + 1) * cfg.batch_size / (time.perf_counter() - started), **stats}
        result.history.append(metrics)
        if on_iteration is not None:
            on_iteration(metrics)
    envs.close()
    return result
