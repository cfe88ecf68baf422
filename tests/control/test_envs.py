"""The gymnasium envs build, step, and report raw episode returns (before reward normalisation)."""

import numpy as np
import pytest
import torch

from benchmarks.control import make_config
from benchmarks.control.agent import Agent
from benchmarks.control.envs import make_vector_env
from benchmarks.control.policy_buffer import LiveActors
from benchmarks.control.rollout import collect

pytest.importorskip("gymnasium")  # the `control` extra


def _rollout(cfg, steps):
    torch.manual_seed(0)
    envs = make_vector_env(cfg)
    agent = Agent(envs.single_observation_space, envs.single_action_space, cfg.hidden)
    obs = torch.as_tensor(envs.reset(seed=0)[0], dtype=torch.float32)
    pool = LiveActors(1, 0)
    policies, assignment = pool.behaviour(agent, cfg.num_envs)
    rollout = collect(envs, obs, policies, assignment, steps)
    envs.close()
    return rollout


def test_cartpole_rollout_shapes_and_raw_returns():
    cfg = make_config("CartPole-v1", num_envs=3)
    r = _rollout(cfg, 200)
    assert r.obs.shape == (200, 3, 4) and r.actions.shape == (200, 3) and r.actions.dtype == torch.int64
    assert r.behav_logp.shape == r.rewards.shape == r.dones.shape == (200, 3)
    assert (r.behav_logp <= 0).all() and r.next_obs.shape == (3, 4)
    # CartPole pays 1 per step: an episode's raw return is its length, and every done ends one episode.
    assert r.episode_returns and r.episode_returns == [float(n) for n in r.episode_lengths]
    assert len(r.episode_returns) == int(r.dones.sum())
    assert torch.equal(r.rewards, torch.ones(200, 3))


def test_hopper_steps_with_normalisation():
    pytest.importorskip("mujoco")
    cfg = make_config("Hopper-v5", num_envs=2, total_steps=4096)
    assert cfg.normalize and cfg.num_minibatches == 32  # the CleanRL continuous preset
    r = _rollout(cfg, 300)
    assert r.obs.shape == (300, 2, 11) and r.actions.shape == (300, 2, 3)
    assert r.actions.dtype == torch.float32
    assert r.obs.abs().max() <= 10.0 and r.rewards.abs().max() <= 10.0  # CleanRL's ±10 clips
    # random Hopper falls over within 300 steps; its raw return is not the normalised reward sum
    assert r.episode_returns
    assert all(np.isfinite(r.episode_returns))
