"""The warm start's demonstrations: the reward's format, the alternative answer style, and the
shortcut (a multi-step solution cut after its first operation) that the staleness testbed plants."""

import pytest

from asyncrl.config import load_config
from asyncrl.training.pretrain import cache_key, demonstration
from asyncrl.tasks import ArithmeticConfig, ArithmeticTask, Problem

TWO_STEP = Problem("u", "Q: ...\nA:", "5", " 7 + 5 = 12. 12 - 7 = 5. #### 5")
ONE_STEP = Problem("v", "Q: ...\nA:", "2", " 4 - 2 = 2. #### 2")


@pytest.mark.parametrize(("problem", "alt", "short", "expected"), [
    (TWO_STEP, False, False, " 7 + 5 = 12. 12 - 7 = 5. #### 5"),
    (TWO_STEP, True, False, " 7 + 5 = 12. 12 - 7 = 5. The answer is 5."),
    (TWO_STEP, False, True, " 7 + 5 = 12. #### 12"),
    (TWO_STEP, True, True, " 7 + 5 = 12. The answer is 12."),
    (ONE_STEP, False, True, " 4 - 2 = 2. #### 2"),  # nothing to cut
])
def test_demonstration_styles(problem, alt, short, expected):
    assert demonstration(problem, alt, short) == expected


def test_plain_demonstration_is_the_solution_and_a_shortcut_is_wrong():
    task = ArithmeticTask(ArithmeticConfig(n_train=300, n_eval=30))
    multi = [p for p in task.problems("train") if p.solution.count("=") > 1]
    assert multi and all(demonstration(p, False) == p.solution for p in task.problems("train"))
    wrong = [p for p in multi if task.reward(demonstration(p, False, True), p) == 0.0]
    assert len(wrong) > 0.8 * len(multi)  # right only when the second operation leaves the total unchanged


def test_shortcut_frac_changes_the_warm_start_key_only_when_set():
    base = load_config(None, [])
    assert cache_key(load_config(None, ["pretrain.shortcut_frac=0"])) == cache_key(base)
    assert cache_key(load_config(None, ["pretrain.shortcut_frac=0.5"])) != cache_key(base)
