"""Gymnasium vector envs wrapped the way CleanRL wraps them.

Each actor (env index) is its own wrapped env inside a ``SyncVectorEnv`` with same-step autoreset: the
observation returned at an episode end is already the next episode's first one, so a rollout row is
a plain sequence of steps with ``done`` flags between episodes (the layout GAE / V-trace expect).
Episode returns are recorded *before* any reward normalisation, so they are the raw env returns.
gymnasium is the optional ``control`` extra: it is imported here only when envs are built
(:mod:`benchmarks.control.extra`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from benchmarks.control.config import ControlConfig
from benchmarks.control.extra import require_control_extra

if TYPE_CHECKING:
    import gymnasium as gym

OBS_CLIP = 10.0
REWARD_CLIP = 10.0


def _wrap_normalized(env: gym.Env, gamma: float) -> gym.Env:
    """CleanRL ppo_continuous_action: clip actions to the box, running-mean/std observation and
    discounted-return normalisation, both clipped to ±10."""
    import gymnasium as gym

    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(env, lambda obs: np.clip(obs, -OBS_CLIP, OBS_CLIP), None)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, lambda r: np.clip(r, -REWARD_CLIP, REWARD_CLIP))


def _env_factory(cfg: ControlConfig) -> Callable[[], gym.Env]:
    def make() -> gym.Env:
        import gymnasium as gym

        env = gym.make(cfg.env_id)
        env = gym.wrappers.RecordEpisodeStatistics(env)
        if isinstance(env.observation_space, gym.spaces.Dict):
            env = gym.wrappers.FlattenObservation(env)
        return _wrap_normalized(env, cfg.gamma) if cfg.normalize else env

    return make


def make_vector_env(cfg: ControlConfig) -> gym.vector.SyncVectorEnv:
    """cfg.num_envs wrapped copies of cfg.env_id, stepped in this process. Without gymnasium (or
    MuJoCo, for a MuJoCo env): MissingControlExtra, one line naming the pip command."""
    require_control_extra([cfg.env_id], cfg.env_id)
    import gymnasium as gym

    return gym.vector.SyncVectorEnv([_env_factory(cfg) for _ in range(cfg.num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)


def finished_episodes(infos: dict) -> tuple[list[float], list[int]]:
    """(raw returns, lengths) of the episodes that ended on this vector step."""
    final = infos.get("final_info") or {}
    if "episode" not in final:
        return [], []
    ended = final["_episode"]
    return ([float(r) for r in final["episode"]["r"][ended]],
            [int(n) for n in final["episode"]["l"][ended]])
