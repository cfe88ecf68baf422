"""The PPO loop learns: CartPole-v1 to CleanRL's level (slow) and a quick improvement check."""

import math

import pytest

from benchmarks.control import make_config, train
from benchmarks.control.run import final_score


@pytest.mark.slow
def test_ppo_solves_cartpole():
    pytest.importorskip("gymnasium")  # the `control` extra
    # CleanRL's ppo.py budget and defaults (500k steps, 4 envs × 128 steps): ~4 min on one core.
    result = train(make_config("CartPole-v1", arm="ppo", seed=0))
    assert final_score(result.history) >= 475


def test_ppo_improves_cartpole_quickly():
    pytest.importorskip("gymnasium")  # the `control` extra
    result = train(make_config("CartPole-v1", arm="ppo", seed=0, total_steps=12288))
    first = result.history[0]["episodic_return"]  # a random policy: ~20
    assert first < 40 and final_score(result.history) > 2 * first


def test_final_score_averages_the_last_tenth_by_episode():
    history = [{"episodic_return": float(i), "episodes": 1} for i in range(19)]
    history.append({"episodic_return": 100.0, "episodes": 3})
    assert final_score(history) == pytest.approx((18 + 300) / 4)
    assert math.isnan(final_score([{"episodic_return": math.nan, "episodes": 0}]))
