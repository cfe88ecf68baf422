"""Any dataset plus the user's reward functions, end to end as subprocesses on a tiny saved model:
a prompt-only JSONL, a TRL-style conversational JSONL and a Parquet file with arbitrary column
names, by the CLI (the ``asyncrl`` console script, reward module in the current directory, no task
name) and by ``asyncrl.train`` from a script whose reward function is defined in the script itself,
in sync and async mode. The reward functions assert what they receive (the other columns as keyword
arguments, TRL's conversational completions for chat prompts): a failed assert stops the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SMALL = ["run.progress=false", "run.report_to=[]", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
         "rollout.max_new_tokens=6", "trainer.steps=2", "trainer.n_minibatches=1", "eval.n_problems=2",
         "eval.samples=1", "eval.every=0", "task.eval_fraction=0.25", "run.name=r"]

REWARDS = '''
def plain_target(completions, prompts, target, **kwargs):
    assert isinstance(completions[0], str) and isinstance(prompts[0], str), (completions[0], prompts[0])
    assert "prompt" not in kwargs and "answer" in kwargs  # every other column; the prompt's is not one
    return [float(t in c) for c, t in zip(completions, target)]

def chat_target(completions, prompts, target, level, **kwargs):
    assert completions[0][0]["role"] == "assistant", completions[0]
    assert prompts[0][-1]["role"] == "user", prompts[0]
    assert all(isinstance(n, int) for n in level)
    return [float(t in c[0]["content"]) + 0.1 * n for c, t, n in zip(completions, target, level)]

def columns_target(completions, prompts, expected_Out, meta):
    assert meta[0]["source"] == "synthetic" and prompts[0].startswith("Repeat ")
    return [float(e in c) for c, e in zip(completions, expected_Out)]
'''


def prompt_only(tmp: Path) -> tuple[str, list[str]]:
    rows = [{"prompt": f"Say the number {i}:", "target": str(i)} for i in range(16)]
    path = tmp / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path), ["reward.funcs=my_rewards:plain_target"]


def conversational(tmp: Path) -> tuple[str, list[str]]:
    rows = [{"prompt": [{"role": "system", "content": "Answer with a number."},
                        {"role": "user", "content": f"What is {i} + 1?"}],
             "target": str(i + 1), "level": i % 3} for i in range(16)]
    path = tmp / "chat.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path), ["reward.funcs=my_rewards:chat_target"]


def parquet(tmp: Path) -> tuple[str, list[str]]:
    from datasets import Dataset

    rows = [{"Instruction": f"Repeat {i} twice:", "expected_Out": f"{i}{i}", "meta": {"source": "synthetic"}}
            for i in range(16)]
    path = tmp / "data.parquet"
    Dataset.from_list(rows).to_parquet(str(path))
    return str(path), ["task.question_field=Instruction", "reward.funcs=my_rewards:columns_target"]


def run(tmp: Path, command: list[str], timeout: int = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("PYTHONPATH", None)  # the reward module is found in the current directory, nowhere else
    return subprocess.run(command, capture_output=True, text=True, cwd=tmp, env=env, timeout=timeout)


def console_script() -> list[str]:
    """The installed ``asyncrl`` command (its import path lacks the current directory, unlike
    ``python -m``), else the module."""
    script = Path(sys.executable).parent / "asyncrl"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "asyncrl.cli"]


def check_summary(tmp: Path, mode: str) -> dict:
    run_dir = tmp / "runs" / "r"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["mode"] == mode
    saved = (run_dir / "config.yaml").read_text()
    assert "name: dataset" in saved  # task.path alone picked the generic task, not arithmetic
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["step"] > 0] == [1, 2]
    return summary


# one async run is in the default set (its worker process imports the module from the current
# directory); the others are slow (~30 s each on a busy 2-core machine)
@pytest.mark.parametrize("data, mode", [
    (prompt_only, "sync"), (conversational, "sync"), (parquet, "sync"), (parquet, "async"),
    pytest.param(prompt_only, "async", marks=pytest.mark.slow),
    pytest.param(conversational, "async", marks=pytest.mark.slow),
])
def test_cli_trains_any_dataset_with_user_rewards(tmp_path, model_dir, data, mode):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    path, extra = data(tmp_path)
    proc = run(tmp_path, [*console_script(), "train", f"task.path={path}", *extra, *SMALL,
                          f"policy.model_path={model_dir}", f"run.mode={mode}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = check_summary(tmp_path, mode)
    assert summary["run_dir"].endswith("r")


SCRIPT = '''
import sys
import asyncrl
from datasets import Dataset

def contains_target(completions, prompts, target, **kwargs):  # defined here: travels by cloudpickle
    assert completions[0][0]["role"] == "assistant" and prompts[0][0]["role"] == "user"
    return [float(t in c[0]["content"]) for c, t in zip(completions, target)]

if __name__ == "__main__":
    train = Dataset.from_list([{{"prompt": [{{"role": "user", "content": f"What is {{i}} + 1?"}}],
                                 "target": str(i + 1)}} for i in range(12)])
    evals = [{{"prompt": [{{"role": "user", "content": "What is 20 + 1?"}}], "target": "21"}}]
    summary = asyncrl.train({{"policy.model_path": {model!r}, "run.mode": sys.argv[1]}},
                            reward_funcs=[contains_target], train_dataset=train, eval_dataset=evals,
                            overrides={{"run.name": "r", "eval.n_problems": 1}}, run__progress=False,
                            run__report_to=[], rollout__prompts_per_step=2, rollout__samples_per_prompt=2,
                            rollout__max_new_tokens=6, trainer__steps=2, trainer__n_minibatches=1,
                            eval__samples=1, eval__every=0)
    print("SUMMARY", summary["steps"], summary["mode"])
'''


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_python_api_trains_with_a_callable_from_the_script(tmp_path, model_dir, mode):
    (tmp_path / "train_it.py").write_text(SCRIPT.format(model=str(model_dir)))
    proc = run(tmp_path, [sys.executable, "train_it.py", mode])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"SUMMARY 2 {mode}" in proc.stdout
    check_summary(tmp_path, mode)
    saved = (tmp_path / "runs" / "r" / "config.yaml").read_text()
    inputs = tmp_path / "runs" / ".inputs"
    assert str(inputs) in saved  # the in-memory dataset and the function, as files every process reads
    assert {p.suffix for p in inputs.iterdir()} == {".parquet", ".jsonl", ".pkl"}


def test_a_callable_that_cannot_travel_is_refused_in_one_line(tmp_path):
    script = textwrap.dedent('''
        import threading, asyncrl
        lock = threading.Lock()
        def locked(completions, **kw):
            with lock:
                return [0.0] * len(completions)
        asyncrl.train(reward_funcs=[locked], train_dataset=[{"prompt": "hi"}] * 4)
    ''')
    (tmp_path / "bad.py").write_text(script)
    proc = run(tmp_path, [sys.executable, "bad.py"], timeout=120)
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert "reward_funcs[0]: locked cannot be sent to the rollout worker processes" in last, proc.stderr[-2000:]
    assert not (tmp_path / "runs" / "r").exists()
