"""The policy buffer keeps and hands out exactly the versions it says, and actors record log μ."""

import numpy as np
import pytest
import torch
from torch import nn

from benchmarks.control import make_config
from benchmarks.control.agent import Agent
from benchmarks.control.envs import make_vector_env
from benchmarks.control.policy_buffer import ACTOR_POOLS, PolicyBuffer, snapshot_equal
from benchmarks.control.rollout import collect


def _module(value: float) -> nn.Module:
    m = nn.Linear(2, 1)
    with torch.no_grad():
        m.weight.fill_(value)
        m.bias.fill_(value)
    return m


def test_buffer_evicts_oldest_first():
    buf = PolicyBuffer(3)
    for v in range(5):
        buf.push(v, _module(float(v)).state_dict())
    assert buf.versions == [2, 3, 4]
    assert buf.state(2)["weight"].eq(2.0).all()
    with pytest.raises(ValueError, match="buffer_capacity"):
        PolicyBuffer(0)


def test_random_pool_draws_every_stored_version_and_only_those():
    pool = ACTOR_POOLS["random"](4, 0)
    learner = _module(0.0)
    for v in range(6):
        with torch.no_grad():
            learner.weight.fill_(float(v))
        pool.publish(v, learner)
    draws = [v for _ in range(200) for v in pool.assign(8)]
    assert set(draws) == {2, 3, 4, 5}
    counts = np.bincount(draws)[2:]
    assert counts.min() > 300  # uniform: 400 expected each out of 1600
    policies, assignment = pool.behaviour(learner, 8)
    assert set(policies) == set(assignment)
    for version, module in policies.items():  # each handed-out module holds exactly that snapshot
        assert module.weight.eq(float(version)).all() and not module.weight.requires_grad


def test_lag_pool_hands_out_the_oldest_and_snapshots_are_copies():
    pool = ACTOR_POOLS["lag"](3, 0)
    learner = _module(0.0)
    seen = []
    for v in range(5):
        with torch.no_grad():
            learner.weight.fill_(float(v))
        pool.publish(v, learner)
        policies, assignment = pool.behaviour(learner, 4)
        seen.append(assignment)
        assert list(policies) == [assignment[0]]
        assert policies[assignment[0]].weight.eq(float(assignment[0])).all()
    assert seen == [[0] * 4, [0] * 4, [0] * 4, [1] * 4, [2] * 4]  # lag N − 1 = 2 once full


def test_live_pool_acts_with_the_learner_itself():
    pool = ACTOR_POOLS["live"](1, 0)
    learner = _module(1.0)
    pool.publish(7, learner)
    policies, assignment = pool.behaviour(learner, 3)
    assert policies == {7: learner} and assignment == [7, 7, 7]


def test_rollout_records_versions_and_behaviour_logp_per_actor():
    pytest.importorskip("gymnasium")  # the `control` extra
    cfg = make_config("CartPole-v1", num_envs=6)
    torch.manual_seed(0)
    envs = make_vector_env(cfg)
    learner = Agent(envs.single_observation_space, envs.single_action_space)
    pool = ACTOR_POOLS["random"](3, 1)
    snapshots = {}
    for v in range(3):  # three distinct policies in the buffer
        with torch.no_grad():
            for p in learner.actor.parameters():
                p.add_(0.5 * torch.randn_like(p))
        pool.publish(v, learner)
        snapshots[v] = {k: t.clone() for k, t in learner.state_dict().items()}
    policies, assignment = pool.behaviour(learner, cfg.num_envs)
    assert len(set(assignment)) > 1  # seed 1 mixes versions across the 6 actors
    obs = torch.as_tensor(envs.reset(seed=0)[0], dtype=torch.float32)
    rollout = collect(envs, obs, policies, assignment, 50)
    assert rollout.versions.tolist() == assignment
    for e, version in enumerate(assignment):  # log μ is the acting snapshot's log-prob
        ref = Agent(envs.single_observation_space, envs.single_action_space)
        ref.load_state_dict(snapshots[version])
        assert snapshot_equal(ref, policies[version])
        with torch.no_grad():
            logp = ref.log_prob(rollout.obs[:, e], rollout.actions[:, e])
        torch.testing.assert_close(rollout.behav_logp[:, e], logp, rtol=1e-5, atol=1e-5)
