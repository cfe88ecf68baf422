"""Evaluation: pass@k from each problem's samples (hand-worked), the greedy reward, and `asyncrl eval`
with its per-problem outputs; the in-training evaluation logs pass@k too."""

import json
import os
import subprocess
import sys

import pytest

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.training.evaluation import EvalResult, eval_metrics
from asyncrl.tasks import Problem

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def test_pass_at_k_by_hand():
    problems = [Problem("a", "1+1?", "2", " 2"), Problem("b", "2+2?", "4", " 4")]
    result = EvalResult(problems, [["x"] * 4, ["y"] * 4], [[1.0, 0, 0, 0], [1.0, 1.0, 0, 0.5]])
    assert result.accuracy() == pytest.approx(3.5 / 8)
    assert result.passes(1) == pytest.approx([0.25, 0.5])  # 0.5 is not a pass: reward >= 1 is
    # 1 − C(n − c, k) / C(n, k): a) 1 − C(3,2)/C(4,2) = 1/2, b) 1 − C(2,2)/C(4,2) = 5/6
    assert result.pass_at(2) == pytest.approx((0.5 + 5 / 6) / 2)
    assert result.pass_at(4) == 1.0
    assert result.answer_accuracy() is None  # no judge given: the metric is not claimed
    judged = EvalResult(problems, [["x"] * 2] * 2, [[1.0, 0], [0, 0]], [[True, True], [False, True]])
    assert judged.answer_accuracy() == pytest.approx(3 / 4)
    rows = result.rows([1, 2])
    assert rows[1] == {"uid": "b", "prompt": "2+2?", "answer": "4", "completions": ["y"] * 4,
                       "rewards": [1.0, 1.0, 0, 0.5], "pass@1": 0.5, "pass@2": pytest.approx(5 / 6)}


@pytest.mark.parametrize("overrides", [["eval.pass_k=[5]"], ["eval.pass_k=[]"], ["eval.pass_k=[0]"],
                                       ["eval.temperature=0", "eval.pass_k=[1,2]"]])
def test_pass_k_must_fit_the_samples(overrides):
    with pytest.raises(ConfigError, match="eval.pass_k"):
        load_config(None, ["eval.samples=4", *overrides])


def test_eval_metrics_names_and_greedy(tiny_policy):
    model, tok, task = tiny_policy
    cfg = load_config(None, ["eval.samples=3", "eval.pass_k=[1,3]", "eval.greedy=true", "rollout.max_new_tokens=6"])
    problems = task.problems("eval")[:3]
    metrics, result = eval_metrics(model, tok, task, problems, cfg)
    assert set(metrics) == {"eval_reward", "eval_pass_at_1", "eval_pass_at_3", "eval_greedy_reward", "eval_answer_acc"}
    oks = [[task.answer_correct(text, p) for text in texts] for texts, p in zip(result.completions, problems)]
    assert metrics["eval_answer_acc"] == pytest.approx(sum(map(sum, oks)) / 9)
    assert [len(c) for c in result.completions] == [3, 3, 3]
    assert metrics["eval_pass_at_1"] <= metrics["eval_pass_at_3"]
    again, _ = eval_metrics(model, tok, task, problems, cfg)
    assert again["eval_greedy_reward"] == metrics["eval_greedy_reward"]


def test_eval_answer_acc_is_the_tasks_own_judgement(tiny_policy, monkeypatch):
    """eval_answer_acc counts what the task's answer_correct accepts, not what the reward pays."""
    model, tok, task = tiny_policy
    cfg = load_config(None, ["eval.samples=2", "rollout.max_new_tokens=4"])
    problems = task.problems("eval")[:3]
    monkeypatch.setattr(task, "answer_correct", lambda text, problem: problem is problems[0])
    metrics, _ = eval_metrics(model, tok, task, problems, cfg)
    assert metrics["eval_answer_acc"] == pytest.approx(1 / 3) and metrics["eval_reward"] == 0.0


@pytest.fixture(scope="module")
def policy_dir(tiny_policy, tmp_path_factory):
    """The tiny random policy as a local HF directory (policy.model_path): no warm start needed."""
    model, tok, _ = tiny_policy
    path = tmp_path_factory.mktemp("policy")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_eval_cli_writes_per_problem_outputs(tmp_path, policy_dir):
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "eval", "--out", str(tmp_path / "ev"),
                           f"policy.model_path={policy_dir}", "eval.n_problems=3", "eval.samples=2",
                           "eval.pass_k=[1,2]", "eval.greedy=true", "rollout.max_new_tokens=6", "run.progress=false"],
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"eval_reward", "pass@1", "pass@2", "greedy_reward"} <= set(report) and report["n_problems"] == 3
    assert "pass@2" in proc.stderr and "greedy_reward" in proc.stderr  # the human summary
    assert json.loads((tmp_path / "ev" / "eval.json").read_text()) == report
    rows = [json.loads(line) for line in (tmp_path / "ev" / "problems.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(len(r["completions"]) == len(r["rewards"]) == 2 for r in rows)
    assert {"uid", "prompt", "answer", "pass@1", "pass@2"} <= set(rows[0])
