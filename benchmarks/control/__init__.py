"""Classic-control RL (gymnasium / MuJoCo) with the objectives registry, under simulated asynchrony.

A CleanRL-style PPO loop whose policy-gradient term comes from ``asyncrl.objectives.policy_loss``
and whose actors act with policies drawn from a policy buffer of past snapshots (docs/control.md).
Imports ``asyncrl.objectives`` and nothing of the LLM runtime. gymnasium and MuJoCo are the optional
``control`` extra, imported only when envs are built (:mod:`benchmarks.control.extra`).
"""

from benchmarks.control.arms import ARMS, Arm
from benchmarks.control.config import KNOWN_ENVS, MUJOCO_ENVS, ControlConfig, make_config, parse_overrides
from benchmarks.control.policy_buffer import ACTOR_POOLS, PolicyBuffer
from benchmarks.control.train import TrainResult, train

__all__ = ["ACTOR_POOLS", "ARMS", "KNOWN_ENVS", "MUJOCO_ENVS", "Arm", "ControlConfig", "PolicyBuffer",
           "TrainResult", "make_config", "parse_overrides", "train"]
