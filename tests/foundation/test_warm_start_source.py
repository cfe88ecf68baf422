"""A warm start is never built from empty solutions: prompt-only rows get the embedded model's
general warm start (the default task's, same cache key), said in one line; rows with worked
solutions keep theirs. No training here: keys and chosen demonstrations only."""

from __future__ import annotations

import json

import pytest
from test_e2e_train import TINY

import asyncrl.training.pretrain as pretrain_module
from asyncrl.config import load_config
from asyncrl.training.demonstrations import warm_start_source
from asyncrl.training.pretrain import WarmStartInputs, pretrained_dir, warm_start


def _rows(tmp_path, name: str, rows: list[dict]) -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture()
def prompt_only(tmp_path) -> list[str]:
    """task.path of prompt + target rows (no answer column, so no worked solution), and its reward."""
    rows = [{"prompt": f"Q: Tom has {i} pens. He buys 2 more. How many pens does Tom have?\nA:",
             "target": str(i + 2)} for i in range(30)]
    (tmp_path / "my_rewards.py").write_text("def hit(completions, **kw):\n    return [0.0] * len(completions)\n")
    return [f"task.path={_rows(tmp_path, 'prompts.jsonl', rows)}", f"reward.funcs={tmp_path}/my_rewards.py:hit"]


@pytest.mark.parametrize("settings", [[], TINY], ids=["defaults", "tiny"])
def test_prompt_only_rows_get_the_general_warm_start(prompt_only, settings):
    cfg = load_config(None, [*settings, *prompt_only])
    general = load_config(None, settings)  # the default task: arithmetic, the same model.* and pretrain.*
    assert cfg.task.name == "dataset" and general.task.name == "arithmetic"
    inputs = WarmStartInputs.of(cfg)
    assert inputs.key() == WarmStartInputs.of(general).key()
    assert pretrained_dir(cfg) == pretrained_dir(general)
    assert inputs.demonstrations and all(p.solution.strip() for p in inputs.demonstrations)
    assert not any("Tom has 3 pens. He buys 2 more" in p.prompt for p in inputs.demonstrations)  # not the rows
    source = warm_start_source(cfg)
    assert source.general and "no worked solutions" in source.note and "policy.model_path" in source.note


def test_rows_with_worked_solutions_keep_their_own_warm_start_without_the_empty_ones(tmp_path):
    solved = [{"question": f"What is {i} + 1?", "answer": f"{i} + 1 = {i + 1}\n#### {i + 1}"} for i in range(8)]
    unsolved = [{"question": f"What is {i} + 2?", "answer": None} for i in range(8)]
    evals = _rows(tmp_path, "eval.jsonl", [{"question": "What is 9 + 9?", "answer": "#### 18"}])
    args = ["task=dataset", f"task.eval_path={evals}", "reward.funcs=[asyncrl.tasks.rewards:correct_answer]"]
    mixed = load_config(None, [*args, f"task.path={_rows(tmp_path, 'mixed.jsonl', solved + unsolved)}"])
    only_solved = load_config(None, [*args, f"task.path={_rows(tmp_path, 'solved.jsonl', solved)}"])
    source = warm_start_source(mixed)
    assert not source.general and len(source.task.problems("train")) == 16
    assert len(source.demonstrations) == 8 and all(p.solution.strip() for p in source.demonstrations)
    assert WarmStartInputs.of(mixed).key() == WarmStartInputs.of(only_solved).key()  # the empty ones add nothing
    assert WarmStartInputs.of(only_solved).key() != WarmStartInputs.of(load_config(None, [])).key()


def test_the_run_says_in_one_line_which_warm_start_it_uses(prompt_only, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ASYNCRL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pretrain_module, "is_complete", lambda path: True)  # as if cached: nothing is built
    cfg = load_config(None, [*TINY, *prompt_only, "run.progress=false"])
    assert warm_start(cfg) == pretrained_dir(load_config(None, TINY))
    lines = [line for line in capsys.readouterr().err.splitlines() if "warm start" in line]
    assert len(lines) == 1 and lines[0].startswith("asyncrl: warm start: the ") and "general warm start" in lines[0]
    warm_start(load_config(None, [*TINY, "run.progress=false"]))  # the arithmetic task itself: no line
    assert "general warm start" not in capsys.readouterr().err
