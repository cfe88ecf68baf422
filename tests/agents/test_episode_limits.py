"""Limits that say so: an episode budget smaller than one turn is refused when the config loads,
and episodes cut by the budget are warned about once per run (they are counted every step in
``episode/end_episode_tokens``)."""

from types import SimpleNamespace

import pytest

from asyncrl.runtime.validate import load_run_config
from asyncrl.runtime.step_log import StepLog


@pytest.mark.parametrize("args, limit", [(["env.episode_tokens=1"], "rollout.max_new_tokens=48"),
                                         (["env.turn_tokens=40", "env.episode_tokens=39"], "env.turn_tokens=40")])
def test_a_budget_smaller_than_a_turn_is_refused(args, limit):
    with pytest.raises(ValueError, match=rf"^config error: env\.episode_tokens: \d+ is less than one turn \({limit}\)"):
        load_run_config(None, ["env.tools=[calculator]", *args])


def test_one_turn_budget_and_single_turn_runs_are_accepted():
    accepted = load_run_config(None, ["env.tools=[calculator]", "env.tool_schemas=none", "env.episode_tokens=48"])
    assert accepted.env.episode_tokens == 48
    assert load_run_config(None, ["env.episode_tokens=1"]).env.episode_tokens == 1  # no episodes: not used


def test_cut_episodes_are_warned_once(capsys):
    log = StepLog(SimpleNamespace(cfg=SimpleNamespace(env=SimpleNamespace(episode_tokens=64))))
    log._warn_cut_episodes(1, {"episode/end_done": 1.0})
    log._warn_cut_episodes(2, {"episode/end_episode_tokens": 0.25})
    log._warn_cut_episodes(3, {"episode/end_episode_tokens": 0.5})
    err = capsys.readouterr().err.splitlines()
    assert err == ["asyncrl: warning: step 2: 25% of episodes ran out of env.episode_tokens=64 and were cut "
                   "(episode/end_episode_tokens); raise it if they need more room"]
