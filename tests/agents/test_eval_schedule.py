"""Evaluation plays its episodes in lock-step rounds (``eval.schedule=rounds``, the default), whatever
``env.schedule`` training uses: two evaluations of one start are then the same computation even when
the environments answer at other moments, which is what lets ``eval.cache_initial`` keep one entry
per start. Under ``eval.schedule=ready`` the engine's batches follow the environments' timing, and so
do the sampled tokens."""

import sys
import time
import types

import pytest

from asyncrl.agents import ENVIRONMENTS
from asyncrl.envs.guess import GuessNumber, GuessTask
from asyncrl.runtime import eval_cache
from asyncrl.runtime.validate import load_run_config
from asyncrl.training.evaluation import eval_metrics

SLOW_S = 0.25  # a slow step: the fast episodes decode without it, even on a loaded machine


class Jittery(GuessNumber):
    """The guess game, whose steps are slow for the episodes of one parity of their secret
    (``PARITY[0]``): two evaluations with another parity see their environments answer in another order."""

    PARITY = [0]

    def reset(self, row):
        self.slow = int(row["answer"]) % 2 == self.PARITY[0]
        return super().reset(row)

    def step(self, action):
        if self.slow:
            time.sleep(SLOW_S)
        return super().step(action)


@pytest.fixture()
def jittery(monkeypatch):
    module = types.ModuleType("asyncrl_test_jittery")
    module.Jittery = Jittery
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setitem(ENVIRONMENTS, "jittery", f"{module.__name__}:Jittery")
    return Jittery.PARITY


def config(*overrides):
    return load_run_config(None, ["task=guess", "env.name=jittery", "env.max_turns=3", "env.turn_tokens=6",
                                  "rollout.max_new_tokens=6", "eval.samples=1", "eval.temperature=1.0",
                                  "env.schedule=ready", *overrides])


def evaluate_twice(tiny_policy, parity, cfg):
    """The sampled completions of two evaluations of one start whose slow environments differ."""
    model, tok, _ = tiny_policy
    task = GuessTask()
    problems = task.problems("eval")[:12]
    assert {int(p.answer) % 2 for p in problems} == {0, 1}
    texts = []
    for slow in (0, 1):
        parity[0] = slow
        _, result = eval_metrics(model, tok, task, problems, cfg)
        texts.append(result.completions)
    return texts


def test_evaluation_in_rounds_is_the_same_computation_whatever_the_environments_timing(tiny_policy, jittery):
    cfg = config()
    assert cfg.eval.schedule == "rounds" and cfg.env.schedule == "ready"  # training keeps its own schedule
    first, second = evaluate_twice(tiny_policy, jittery, cfg)
    assert first == second


def test_evaluation_under_ready_follows_the_environments_timing(tiny_policy, jittery):
    first, second = evaluate_twice(tiny_policy, jittery, config("eval.schedule=ready"))
    assert first != second  # other batches, other draws: why rounds is the default


def test_the_step0_cache_key_of_episodes_names_the_schedule_and_single_turns_keep_theirs(tiny_policy):
    model, _, task = tiny_policy
    problems = task.problems("eval")[:4]

    def key(*overrides):
        return eval_cache.initial_eval_key(load_run_config(None, list(overrides)), model, problems)

    assert key("eval.schedule=ready") == key()  # single turns: the setting changes nothing, nor the key
    guess = ["task=guess", "env.name=guess"]
    assert key(*guess, "eval.schedule=ready") != key(*guess)  # an entry of ready is not read as one of rounds
