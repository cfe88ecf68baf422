"""Reward functions by import path (docs/rewards.md): resolution, signatures, weights, errors that
name the function and row, on_error=zero counting, per-function metrics, and the task registry
guard. In-process and fast; the end-to-end runs are in tests/runtime/test_rewards_e2e.py."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.runtime.buffer import Group, concat_groups
from asyncrl.config import RewardConfig
from asyncrl.runtime.validate import load_run_config
from asyncrl.core.loader import ConfigError
from asyncrl.rewards import DEFAULT_REWARD, RewardFunctionError, RewardSet, load_function, resolve
from asyncrl.tasks import TASKS, ArithmeticConfig, ArithmeticTask, Problem, configured_task
from asyncrl.types import Batch, batch_from_numpy, batch_to_numpy

USER_REWARDS = '''
import math

def has_marker(completions, **kwargs):
    return [1.0 if "####" in c else 0.0 for c in completions]

def length_penalty(completions, *, answer):  # no **kwargs: gets only what it names
    return [-0.1 * len(c) for c in completions]

def echo_fields(completions, *, prompts, uid, answer, solution, problems, task):
    return [float(len(p) + len(u) + len(a) + len(s) > 0 and q.uid == u and task is not None)
            for p, u, a, s, q in zip(prompts, uid, answer, solution, problems)]

def trl_style(prompts, completions, **kwargs):  # TRL passes everything by keyword
    return [float(len(p) > 0) for p in prompts]

def picky(completions, *, answer):
    for c, a in zip(completions, answer):
        if c == "boom":
            raise ValueError(f"cannot parse {c!r}")
    return [1.0] * len(completions)

def nan_on_x(completions, **kwargs):
    return [math.nan if c == "x" else 1.0 for c in completions]

def none_on_x(completions, **kwargs):
    return [None if c == "x" else 1.0 for c in completions]

def one_value(completions, **kwargs):
    return [1.0]

def needs_column(completions, *, difficulty):
    return [1.0 for _ in completions]

def no_args():
    return []

def two_positional(completions, answer, /):
    return [1.0 for _ in completions]

NOT_A_FUNCTION = 3
'''


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("user") / "my_rewards.py"
    path.write_text(USER_REWARDS)
    return path


@pytest.fixture(scope="module")
def task():
    return ArithmeticTask(ArithmeticConfig(n_train=20, n_eval=5))


def rows(task, n=3):
    return task.problems("train")[:n]


def reward_set(user_file, task, names, weights=None, on_error="raise"):
    functions = [load_function(f"{user_file}:{n}") for n in names]
    return RewardSet(functions, weights or [1.0] * len(functions), on_error, task)


# -- resolution --------------------------------------------------------------------------------


def test_module_path_and_file_path_resolve(user_file):
    from asyncrl.tasks.rewards import correct_answer

    assert resolve("asyncrl.tasks.rewards:correct_answer") is correct_answer
    fn = resolve(f"{user_file}:has_marker")
    assert fn(["#### 1", "no"]) == [1.0, 0.0]
    assert resolve(f"{user_file}:has_marker") is fn  # the file is executed once per process


def test_relative_file_path_is_made_absolute_at_load(user_file, monkeypatch):
    monkeypatch.chdir(user_file.parent)
    cfg = load_run_config(None, ["reward.funcs=[my_rewards.py:has_marker]"])
    assert cfg.reward.funcs == [f"{user_file}:has_marker"]


@pytest.mark.parametrize("path, message", [
    ("no_such_pkg.rewards:fmt", "reward.funcs[0]: cannot import 'no_such_pkg.rewards:fmt': ModuleNotFoundError"),
    ("asyncrl.tasks.rewards:nope", "asyncrl.tasks.rewards has no attribute 'nope'"),
    ("just_a_name", "is not 'pkg.module:function'"),
    ("{file}:NOT_A_FUNCTION", "is not callable"),
    ("{dir}/missing.py:fn", "no such file"),
    ("{file}:no_args", "takes no completions argument"),
    ("{file}:two_positional", "positional-only parameter(s) answer"),
])
def test_bad_path_or_signature_is_a_config_error_naming_key_and_path(user_file, path, message):
    path = path.format(file=user_file, dir=user_file.parent)
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"reward.funcs=[{path}]"])
    text = str(err.value)
    assert text.startswith("config error: reward.funcs[0]: ") and "\n" not in text
    assert message in text and path.split(":")[0] in text


def test_a_broken_module_names_its_error(tmp_path):
    (tmp_path / "broken.py").write_text("raise RuntimeError('import-time failure')\n")
    with pytest.raises(ConfigError, match=r"reward.funcs\[0\]: cannot import .*RuntimeError: import-time failure"):
        load_run_config(None, [f"reward.funcs=[{tmp_path}/broken.py:fn]"])


def test_weights_must_match_the_functions(user_file):
    with pytest.raises(ConfigError, match="reward.weights: 1 weight"):
        load_run_config(None, [f"reward.funcs=[{user_file}:has_marker, {user_file}:trl_style]", "reward.weights=[2]"])
    with pytest.raises(ConfigError, match="reward.on_error"):
        load_run_config(None, ["reward.on_error=ignore"])


def test_default_is_the_tasks_correctness_reward(task):
    cfg = load_run_config(None, [])
    assert cfg.reward.funcs == [] and cfg.reward.weights is None
    rs = RewardSet.from_config(cfg.reward, task)
    assert [f.path for f in rs.functions] == [DEFAULT_REWARD] and rs.names == ["correct_answer"]
    problems = rows(task)
    completions = [problems[0].solution, "#### -1", f" #### {problems[2].answer}"]
    assert rs.totals(completions, problems) == [task.reward(c, p) for c, p in zip(completions, problems)] \
        == [1.0, 0.0, 1.0]


# -- calling -------------------------------------------------------------------------------------


def test_keyword_arguments_are_passed_only_where_accepted(user_file, task):
    rs = reward_set(user_file, task, ["length_penalty", "echo_fields", "trl_style", "has_marker"])
    scores = rs.score(["ab", "#### 1", ""], rows(task))
    assert [row[0] for row in scores.parts] == pytest.approx([-0.2, -0.6, 0.0])
    assert [row[1:] for row in scores.parts] == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def test_total_is_the_weighted_sum(user_file, task):
    rs = reward_set(user_file, task, ["has_marker", "length_penalty"], weights=[2.0, 0.5])
    scores = rs.score(["#### 12", "no"], rows(task, 2))
    # row 0: 2·1 + 0.5·(−0.7) = 1.65; row 1: 2·0 + 0.5·(−0.2) = −0.1
    assert scores.total == pytest.approx([1.65, -0.1]) and scores.errors == 0


def test_row_fields_of_the_problem_reach_the_function(user_file):
    problems = [Problem("u1", "p1", "1", " #### 1", fields={"difficulty": "easy", "answer": "raw text"}),
                Problem("u2", "p2", "2", " #### 2")]
    rs = RewardSet([load_function(f"{user_file}:needs_column")], [1.0], "raise")
    ctx = rs.context(problems)
    assert ctx["difficulty"] == ["easy", None] and ctx["answer"] == ["1", "2"]  # the parsed gold wins
    assert rs.totals(["a", "b"], problems) == [1.0, 1.0]


def test_a_required_argument_no_row_has_is_named(user_file, task):
    rs = reward_set(user_file, task, ["needs_column"])
    with pytest.raises(RewardFunctionError, match=r"my_rewards.py:needs_column needs argument\(s\) difficulty"):
        rs.score(["a"], rows(task, 1))


# -- errors ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, completions, expected", [
    ("picky", ["ok", "boom", "ok"], "picky raised ValueError: cannot parse 'boom' on row uid={uid}"),
    ("nan_on_x", ["ok", "x", "ok"], "nan_on_x returned nan on row uid={uid}"),
])
def test_a_failing_function_is_one_line_naming_it_and_the_row(user_file, task, name, completions, expected):
    problems = rows(task)
    with pytest.raises(RewardFunctionError) as err:
        reward_set(user_file, task, ["has_marker", name]).score(completions, problems)
    text = str(err.value)
    assert text.startswith(f"reward function {user_file}:{name} ") and "\n" not in text
    assert expected.format(uid=problems[1].uid) in text
    assert isinstance(err.value, ConfigError)  # exit 2 through the CLI's guard, also from a worker


def test_wrong_length_is_an_error_even_under_on_error_zero(user_file, task):
    with pytest.raises(RewardFunctionError, match="one_value returned 1 values for 3 completions"):
        reward_set(user_file, task, ["one_value"], on_error="zero").score(["a", "b", "c"], rows(task))


def test_on_error_zero_counts_each_failure(user_file, task):
    rs = reward_set(user_file, task, ["picky", "nan_on_x"], weights=[1.0, 2.0], on_error="zero")
    scores = rs.score(["boom", "x", "ok"], rows(task))
    assert scores.errors == 2
    assert scores.total == [2.0, 1.0, 3.0]  # boom: picky 0 + 2·1; x: 1 + 2·0; ok: 1 + 2·1
    parts, failed = rs.parts_tensor(scores), rs.failed_tensor(scores)
    assert torch.isnan(parts[0, 0]) and torch.isnan(parts[1, 1]) and parts.shape == (3, 2)
    assert failed.tolist() == [[True, False], [False, True], [False, False]]
    metrics = rs.metrics(parts, failed)  # a failure counts as its 0 in the function's mean
    assert metrics["reward/picky"] == pytest.approx(2 / 3) and metrics["reward/nan_on_x"] == pytest.approx(2 / 3)
    assert metrics["reward/errors"] == 2


# -- metrics: reward parts travel with the batch ----------------------------------------------------


def _batch(parts: torch.Tensor) -> Batch:
    n = parts.shape[0]
    z = torch.zeros(n, 2)
    return Batch(prompt_ids=z.long(), prompt_mask=z.bool(), completion_ids=z.long(), behav_logp=z,
                 versions=z.long(), completion_mask=z.bool(), rewards=parts.sum(1), group_ids=torch.arange(n),
                 advantages=torch.zeros(n), reward_parts=parts)


def test_reward_parts_survive_select_transfer_and_concat():
    a, b = _batch(torch.tensor([[1.0, 0.0], [0.0, 2.0]])), _batch(torch.tensor([[3.0, math.nan]]))
    assert torch.equal(a.select(torch.tensor([1])).reward_parts, torch.tensor([[0.0, 2.0]]))
    assert torch.equal(batch_from_numpy(batch_to_numpy(a)).reward_parts, a.reward_parts)
    joined = concat_groups([Group(a), Group(b)], pad_id=0)
    assert joined.reward_parts.shape == (3, 2) and torch.isnan(joined.reward_parts[2, 1])
    plain = Batch(**{k: v for k, v in vars(a).items() if k != "reward_parts"})
    assert plain.select(torch.tensor([0])).reward_parts is None and plain.to("cpu") is plain
    assert concat_groups([Group(plain), Group(a)], pad_id=0).reward_parts is None


def test_per_function_metrics_are_means_per_step(user_file, task):
    rs = reward_set(user_file, task, ["has_marker", "length_penalty"])
    parts = torch.tensor([[1.0, -0.5], [0.0, -0.1], [1.0, -0.3], [1.0, -0.1]])
    assert rs.metrics(parts) == {"reward/has_marker": 0.75, "reward/length_penalty": pytest.approx(-0.25),
                                 "reward_std/has_marker": pytest.approx(0.5),
                                 "reward_std/length_penalty": pytest.approx(torch.tensor([-0.5, -0.1, -0.3, -0.1]).std().item())}
    assert rs.metrics(None) == {}


def test_repeated_function_names_get_distinct_metrics(user_file, task):
    rs = reward_set(user_file, task, ["has_marker", "has_marker"])
    assert rs.names == ["has_marker", "has_marker_2"]


# -- the task registry guard ----------------------------------------------------------------------


def test_a_replaced_task_registry_entry_is_refused(monkeypatch):
    class MyTask(ArithmeticTask):
        def reward(self, completion, problem):
            return 0.5

    monkeypatch.setitem(TASKS, "arithmetic", MyTask)
    with pytest.raises(ConfigError) as err:
        configured_task(load_run_config(None, []).task)
    text = str(err.value)
    assert text.startswith("config error: task.name: asyncrl.tasks.TASKS['arithmetic'] was replaced")
    assert "MyTask" in text and "reward.funcs" in text and "\n" not in text


def test_reward_config_round_trips_through_to_dict(user_file):
    cfg = load_run_config(None, [f"reward.funcs=[{user_file}:has_marker]", "reward.weights=[0.5]",
                             "reward.on_error=zero"])
    again = load_run_config(None, [f"reward={cfg.to_dict()['reward']}"])
    assert again.reward == cfg.reward == RewardConfig([f"{user_file}:has_marker"], [0.5], "zero")


def test_dataset_columns_are_row_fields(tmp_path, user_file):
    import json

    from asyncrl.tasks import build_task

    records = [{"question": f"What is {i} + 0?", "answer": f"{i} + 0 = {i}\n#### {i}", "difficulty": i % 3}
               for i in range(12)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    task = build_task("gsm8k", {"path": str(tmp_path / "d.jsonl"), "eval_fraction": 0.2})
    try:
        problems = task.problems("train")[:3]
        rs = RewardSet([load_function(f"{user_file}:needs_column"), load_function(DEFAULT_REWARD)], [1.0, 1.0],
                       "raise", task)
        ctx = rs.context(problems)
        by_question = {r["question"]: r for r in records}
        assert ctx["difficulty"] == [by_question[p.fields["question"]]["difficulty"] for p in problems]
        assert ctx["answer"] == [p.answer for p in problems]  # the parsed gold, not the raw column
        assert rs.totals([p.solution for p in problems], problems) == [2.0, 2.0, 2.0]
        with pytest.raises(RewardFunctionError, match=r"picky raised ValueError: .* on row uid=gsm8k-train-000001 "
                                                      r"\(.*d.jsonl:\d+\)"):
            RewardSet([load_function(f"{user_file}:picky")], [1.0], "raise", task).score(
                ["ok", "boom", "ok"], problems)
    finally:
        task.close()
