"""A tiny `asyncrl train` on a chat-format JSONL (system + user messages), sync and async, as a
subprocess: the embedded tokenizer has no chat template, so the plain rendering is used; one prompt
is over task.max_prompt_length and is truncated; top_p / top_k sampling is on."""

import json
import os
import subprocess
import sys

import pytest

from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

ROWS = [{"messages": [{"role": "system", "content": "Reply with #### and the number."},
                      {"role": "user", "content": f"What is {i} + {i % 3}?"}],
         "answer": f"#### {i + i % 3}"} for i in range(20)]
LONG = {"messages": [{"role": "user", "content": "Add: " + "one and " * 60}], "answer": "#### 1"}


# async starts a worker process and a verifier pool in it: ~40 s on a busy 2-core machine
@pytest.mark.parametrize("mode", ["sync", pytest.param("async", marks=pytest.mark.slow)])
def test_train_on_chat_jsonl(tmp_path, model_dir, mode):
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in [*ROWS, LONG]))
    args = ["task=gsm8k", f"task.path={data}", "task.messages_field=messages", "task.eval_fraction=0.2",
            "task.max_prompt_length=96", "task.long_prompts=truncate", f"policy.model_path={model_dir}",
            "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=6",
            "rollout.top_p=0.9", "rollout.top_k=50", "eval.top_p=0.95", "eval.n_problems=2", "eval.samples=1",
            "eval.every=0", "trainer.steps=2", "trainer.n_minibatches=1", f"run.mode={mode}",
            "run.progress=false", "run.report_to=[]", "run.name=chat", f"run.out_dir={tmp_path / 'runs'}"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = run_cli(["train", *args], tmp_path, env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # the over-long prompt is reported once at start-up and counted in the summary
    assert "prompt(s) longer than task.max_prompt_length=96 tokens: left-truncated" in proc.stderr
    summary = json.loads((tmp_path / "runs" / "chat" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["mode"] == mode
    assert summary.get("prompts_truncated_train", 0) + summary.get("prompts_truncated_eval", 0) == 1
    saved = (tmp_path / "runs" / "chat" / "config.yaml").read_text()
    assert "messages_field: messages" in saved and "max_prompt_length: 96" in saved
