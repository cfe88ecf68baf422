"""The generic dataset task, the task.path-alone rule, conversational reward arguments and the
Python API's config building, in process (the end-to-end runs: tests/runtime/test_any_dataset_e2e.py)."""

from __future__ import annotations

import json
import sys

import pytest

from asyncrl.config import ConfigError, RewardConfig
from asyncrl.runtime.validate import load_run_config
from asyncrl.rewards import RewardSet
from asyncrl.tasks import build_task

CHAT = [{"role": "user", "content": "What is 2 + 2?"}]


def write(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def test_task_path_alone_selects_the_dataset_task_and_arithmetic_refuses_a_file(tmp_path):
    path = write(tmp_path, [{"prompt": "hi"}])
    assert load_run_config(None, [f"task.path={path}"]).task.name == "dataset"
    assert load_run_config(None, []).task.name == "arithmetic"
    assert load_run_config(None, ["task=gsm8k", f"task.path={path}"]).task.name == "gsm8k"
    with pytest.raises(ConfigError, match="task.path: the arithmetic task generates its problems and reads no file"):
        load_run_config(None, ["task=arithmetic", f"task.path={path}"])


def test_prompts_as_written_columns_without_the_prompt_and_optional_gold(tmp_path):
    rows = [{"prompt": "Say hi", "target": "hi"}, {"prompt": CHAT, "target": "4", "answer": "#### 4"},
            {"prompt": "Say yo", "target": "yo", "answer": None}]
    task = build_task("dataset", {"path": write(tmp_path, rows), "eval_path": write(tmp_path, rows[:1], "e.jsonl")})
    train = {p.fields["target"]: p for p in task.problems("train")}
    assert train["yo"].prompt == "Say yo" and train["yo"].answer == "" and train["yo"].solution == ""
    assert train["4"].messages == (("user", "What is 2 + 2?"),) and train["4"].answer == "4"
    assert all("prompt" not in p.fields for p in train.values())
    templated = build_task("dataset", {"path": write(tmp_path, rows), "eval_fraction": 0.5,
                                       "prompt_template": "Q: {question}\nA:"})
    assert all(p.prompt.startswith(("Q: ", "user:")) for p in templated.problems("train") + templated.problems("eval"))


def test_a_row_without_a_prompt_column_names_its_line(tmp_path):
    task = build_task("dataset", {"path": write(tmp_path, [{"prompt": "a"}, {"text": "b"}])})
    with pytest.raises(ValueError, match=r"d.jsonl:2: no prompt column .*the row has: text\); name it: "
                                         r"task.question_field=<column>"):
        task.problems("train")


def test_default_reward_without_gold_is_one_line_naming_the_fix(tmp_path):
    task = build_task("dataset", {"path": write(tmp_path, [{"prompt": f"p{i}"} for i in range(8)]),
                                  "eval_fraction": 0.5})
    with pytest.raises(ConfigError, match=r"reward.funcs: .*d.jsonl:\d+: no answer in column 'answer' and no "
                                          r"reward function .*reward.funcs=\[my_module:my_reward\]"):
        RewardSet.from_config(RewardConfig(), task)


def test_chat_rows_get_conversational_completions_unless_text_is_asked(tmp_path):
    rows = [{"prompt": CHAT, "k": 1}, {"prompt": "plain", "k": 2}]
    task = build_task("dataset", {"path": write(tmp_path, rows), "eval_path": write(tmp_path, rows[:1], "e.jsonl")})
    problems = sorted(task.problems("train") + task.problems("eval"), key=lambda p: p.fields["k"])
    seen = {}

    def record(completions, prompts, k):
        seen["c"], seen["p"], seen["k"] = completions, prompts, k
        return [0.0] * len(completions)

    from asyncrl.rewards.resolve import RewardFunction

    fn = RewardFunction("x:record", "record", record, True, frozenset({"prompts", "k"}), frozenset())
    RewardSet([fn], [1.0], "raise", task).score(["4", "x"], problems)
    assert seen["c"] == [[{"role": "assistant", "content": "4"}], "x"]
    assert seen["p"] == [CHAT, "plain"] and seen["k"] == [1, 2]
    RewardSet([fn], [1.0], "raise", task, completion_format="text").score(["4", "x"], problems)
    assert seen["c"] == ["4", "x"] and seen["p"] == ["user: What is 2 + 2?\nassistant:", "plain"]


def test_builtin_rewards_read_conversational_completions():
    from asyncrl.tasks.rewards import exact_answer

    assert exact_answer([[{"role": "assistant", "content": "#### 4"}], "#### 5"], answer=["4", "4"]) == [1.0, 0.0]


def importable_reward(completions, **kwargs):
    return [0.0] * len(completions)


def test_api_config_keys_datasets_and_function_references(tmp_path):
    from asyncrl.api import build_config

    cfg = build_config({"run.out_dir": str(tmp_path), "trainer": {"steps": 3}}, overrides={"loss": "ppo"},
                       trainer__lr=1e-4, train_dataset=[{"prompt": f"p{i}", "t": i} for i in range(8)],
                       reward_funcs=[importable_reward, "asyncrl.tasks.rewards:exact_answer", lambda c, **k: [0] * len(c)])
    assert (cfg.trainer.steps, cfg.trainer.lr, cfg.loss.name, cfg.task.name) == (3, 1e-4, "ppo", "dataset")
    assert cfg.task.path.startswith(str(tmp_path / ".inputs" / "train_dataset-")) and cfg.task.path.endswith(".jsonl")
    assert cfg.reward.funcs[0] == f"{__name__}:importable_reward"  # by reference: importable
    assert cfg.reward.funcs[1] == "asyncrl.tasks.rewards:exact_answer"
    assert cfg.reward.funcs[2].endswith(".pkl:lambda")  # by value


def test_api_refuses_what_cannot_travel(tmp_path, monkeypatch):
    from asyncrl.api import build_config

    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # not installed: by reference only
    with pytest.raises(ConfigError, match=r"reward_funcs\[0\]: .*<lambda>.* cloudpickle is not installed"):
        build_config({"run.out_dir": str(tmp_path)}, reward_funcs=[lambda c, **k: c])
    with pytest.raises(ConfigError, match="train_dataset: expected a datasets.Dataset"):
        build_config(train_dataset=42)
