"""``None`` from a reward function means "does not apply to this row", as in TRL's GRPOTrainer: the
row's total leaves the function out (TRL: NaN, then ``nansum`` over the functions), the function's
mean and std are over the rows it applies to (TRL: ``nanmean`` / ``nanstd``), and a row no function
applies to totals 0 with one warning. A failure under ``on_error=zero`` stays apart: counted 0 and
in ``reward/errors``. The end-to-end runs are in tests/runtime/test_rewards_e2e.py."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.rewards import RewardSet, load_function
from asyncrl.runtime.buffer import Group, concat_groups
from asyncrl.tasks import ArithmeticConfig, ArithmeticTask
from asyncrl.types import Batch, batch_from_numpy, batch_to_numpy

USER_REWARDS = '''
def first_two(completions, **kwargs):  # applies to completions that start with "a"
    return [2.0 if c == "ab" else 1.0 if c.startswith("a") else None for c in completions]

def short(completions, **kwargs):  # applies to completions of up to two characters
    return [float(len(c)) if len(c) <= 2 else None for c in completions]

def never(completions, **kwargs):
    return [None for _ in completions]

def boom_on_b(completions, **kwargs):
    if "b" in completions:
        raise ValueError("b")
    return [None if c == "zz" else 1.0 for c in completions]
'''


@pytest.fixture(scope="module")
def functions(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "none_rewards.py"
    path.write_text(USER_REWARDS)
    return lambda *names: [load_function(f"{path}:{n}") for n in names]


@pytest.fixture(scope="module")
def problems():
    return ArithmeticTask(ArithmeticConfig(n_train=20, n_eval=5)).problems("train")


def test_none_is_left_out_of_the_total_as_trls_nansum(functions, problems):
    rs = RewardSet(functions("first_two", "short"), [1.0, 0.5], "raise")
    completions = ["ab", "abc", "z", "a"]
    scores = rs.score(completions, problems[:4])
    # TRL: rewards_per_func with NaN for None, then (rewards_per_func * weights).nansum(dim=1)
    per_func = torch.tensor([[2.0, 2.0], [1.0, math.nan], [math.nan, 1.0], [1.0, 1.0]])
    expected = (per_func * torch.tensor([1.0, 0.5])).nansum(dim=1)
    assert scores.total == pytest.approx(expected.tolist()) == [3.0, 1.0, 0.5, 1.5]
    assert scores.errors == 0 and scores.failed == [[False] * 2] * 4
    parts = rs.parts_tensor(scores)
    assert torch.isnan(parts[1, 1]) and torch.isnan(parts[2, 0])
    metrics = rs.metrics(parts, rs.failed_tensor(scores))
    # TRL: nanmean / nanstd (n - 1) of each function's column
    assert metrics["reward/first_two"] == pytest.approx(4 / 3)
    assert metrics["reward/short"] == pytest.approx(4 / 3)
    assert metrics["reward_std/first_two"] == pytest.approx(torch.tensor([2.0, 1.0, 1.0]).std().item())
    assert metrics["reward_std/short"] == pytest.approx(torch.tensor([2.0, 1.0, 1.0]).std().item())
    assert "reward/errors" not in metrics  # on_error=raise: None is no error


def test_a_row_no_function_applies_to_totals_zero_with_one_warning(functions, problems, capsys):
    rs = RewardSet(functions("first_two", "never"), [1.0, 1.0], "raise")
    assert rs.score(["ab", "zzz"], problems[:2]).total == [2.0, 0.0]
    rs.score(["zzz", "q"], problems[2:4])  # more such rows: not said again
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"asyncrl: warning: every reward function returned None on row uid={problems[1].uid}, "
                             "so its reward is 0 (reward functions: first_two, never)")
    metrics = rs.metrics(rs.parts_tensor(rs.score(["zzz"], problems[:1])))
    assert math.isnan(metrics["reward/first_two"]) and math.isnan(metrics["reward/never"])  # applied to none


def test_a_failure_under_on_error_zero_is_told_apart_from_none(functions, problems, capsys):
    rs = RewardSet(functions("boom_on_b", "short"), [1.0, 1.0], "zero")
    scores = rs.score(["b", "zz", "a"], problems[:3])  # the batch call raises: row by row
    assert scores.errors == 1 and scores.failed == [[True, False], [False, False], [False, False]]
    assert scores.total == [1.0, 2.0, 2.0]  # b: failed 0 + 1; zz: None + 2; a: 1 + 1
    metrics = rs.metrics(rs.parts_tensor(scores), rs.failed_tensor(scores))
    assert metrics["reward/boom_on_b"] == pytest.approx(0.5)  # the failure counts 0, the None not at all
    assert metrics["reward/errors"] == 1
    assert capsys.readouterr().err == ""  # every row had a value somewhere


def test_the_failure_mask_travels_with_the_batch():
    def batch(parts, failed):
        n = parts.shape[0]
        z = torch.zeros(n, 2)
        return Batch(prompt_ids=z.long(), prompt_mask=z.bool(), completion_ids=z.long(), behav_logp=z,
                     versions=z.long(), completion_mask=z.bool(), rewards=parts.nansum(1),
                     group_ids=torch.arange(n), advantages=torch.zeros(n), reward_parts=parts, reward_failed=failed)

    a = batch(torch.tensor([[1.0, math.nan]]), torch.tensor([[False, True]]))
    b = batch(torch.tensor([[math.nan, 2.0]]), torch.tensor([[False, False]]))
    assert torch.equal(batch_from_numpy(batch_to_numpy(a)).reward_failed, a.reward_failed)
    joined = concat_groups([Group(a), Group(b)], pad_id=0)
    assert joined.reward_failed.tolist() == [[False, True], [False, False]]
    assert joined.select(torch.tensor([1])).reward_failed.tolist() == [[False, False]]
