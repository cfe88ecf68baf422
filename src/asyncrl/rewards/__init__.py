"""Reward functions by import path (``reward.funcs``) and reward models by directory
(``reward.models``): resolution and scoring. See docs/rewards.md."""

from asyncrl.rewards.resolve import CONTEXT, RewardFunction, load_function
# after the submodule of the same name, whose import binds ``asyncrl.rewards.resolve`` to it
from asyncrl.core.import_path import normalize_path, resolve  # noqa: I001
from asyncrl.rewards.reward_model import RewardModel
from asyncrl.rewards.scorer import DEFAULT_REWARD, RewardFunctionError, RewardSet, Scores

__all__ = ["CONTEXT", "DEFAULT_REWARD", "RewardFunction", "RewardFunctionError", "RewardModel", "RewardSet", "Scores",
           "load_function", "normalize_path", "resolve"]
