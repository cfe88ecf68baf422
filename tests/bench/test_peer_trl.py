"""The TRL GRPOTrainer peer baseline (``python -m benchmarks.bench.peer_trl``): tiny end-to-end run, prompt
token ids identical to asyncrl's, one-line errors."""

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from asyncrl.config import load_config  # noqa: E402
from asyncrl.policy.prompts import encode_prompt  # noqa: E402
from cli_forks import checkout_env  # noqa: E402  (tests/: the checkout on PYTHONPATH)

TINY = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=128", "model.vocab_size=400",
    "task.arithmetic.min_steps=1", "task.arithmetic.max_steps=1", "task.arithmetic.ops=+",
    "task.arithmetic.max_value=9", "task.arithmetic.n_train=70", "task.arithmetic.n_eval=4",
    # a barely warm start: this test checks plumbing, not learning (keeps it to seconds)
    "pretrain.steps=10", "pretrain.batch_size=32", "pretrain.warmup_steps=2", "pretrain.alt_style_frac=0",
    "trainer.steps=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4",
    "rollout.max_new_tokens=8", "eval.n_problems=8", "eval.samples=1", "run.progress=false",
    "run.tensorboard=false",
]

SUMMARY_KEYS = {"mode", "loss", "seed", "steps", "initial_eval_reward", "final_eval_reward", "eval_history",
                "wall_time_s", "train_wall_s", "time_per_step_s", "samples_per_s", "torch_threads",
                "trl_version", "peak_rss_mb", "run_dir"}


def run_peer(cwd: Path, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    env = checkout_env({**os.environ, "HF_HUB_OFFLINE": "1"})
    return subprocess.run([sys.executable, "-m", "benchmarks.bench.peer_trl", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=timeout)


@pytest.mark.slow  # the apparatus end to end: make test-all
def test_peer_trl_end_to_end(tmp_path, cache):
    proc = run_peer(tmp_path, *TINY, f"policy.cache_dir={cache}", "run.out_dir=runs", "run.name=t")
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    run_dir = tmp_path / "runs" / "t"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert printed == summary
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["mode"] == "trl-grpo" and summary["steps"] == 2 and summary["loss"] == "trl-bnpo"
    assert [step for step, _ in summary["eval_history"]] == [0, 2]
    assert summary["samples_per_s"] == pytest.approx(2 * 8 / summary["train_wall_s"])
    assert not (run_dir / "summary.json.tmp").exists()
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]
    records = records[1:]  # step 0: the eval before training
    for r in records:
        assert math.isfinite(r["loss"]) and 0 <= r["reward_mean"] <= 1 and r["step_time_s"] > 0
        assert r["reward_mean"] == pytest.approx(r["trl_reward"])  # our scorer saw what TRL trained on
    assert "eval_reward" in records[1] and records[1]["eval_reward"] == summary["final_eval_reward"]
    args = json.loads((run_dir / "trl_args.json").read_text())
    assert args["per_device_train_batch_size"] == 2 and args["steps_per_generation"] == 4
    assert args["max_steps"] == 8 and args["num_generations"] == 4 and args["beta"] == 0.0


def _tiny_trainer(tiny_policy, tokenizer, tmp_path):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from benchmarks.bench.peer_trl import prompt_for, trl_options

    model, _, task = tiny_policy
    cfg = load_config(None, ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "trainer.steps=1"])
    texts = [p.prompt for p in task.problems("train")[:16]]
    data = Dataset.from_list([{"prompt": prompt_for(tokenizer, t, True), "problem_index": i}
                              for i, t in enumerate(texts)])
    trainer = GRPOTrainer(model=copy.deepcopy(model), reward_funcs=[lambda completions, **_: [0.0] * len(completions)],
                          args=GRPOConfig(**trl_options(cfg, str(tmp_path / "trl"))), train_dataset=data,
                          processing_class=tokenizer)
    return trainer, texts


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_trl_sees_the_prompt_ids_asyncrl_encodes(tiny_policy, tmp_path, chat):
    from benchmarks.bench.peer_trl import check_prompt_ids

    tokenizer = copy.deepcopy(tiny_policy[1])
    if chat:
        tokenizer.chat_template = ("{% for m in messages %}<bos>User: {{ m['content'] }}\n{% endfor %}"
                                   "{% if add_generation_prompt %}Assistant:{% endif %}")
    trainer, texts = _tiny_trainer(tiny_policy, tokenizer, tmp_path)
    ours = [encode_prompt(tokenizer, t, True) for t in texts]
    if not chat:  # our tokenizer's post-processor adds BOS; TRL must keep exactly one
        assert all(ids[0] == tokenizer.bos_token_id and ids[1] != tokenizer.bos_token_id for ids in ours)
    from benchmarks.bench.peer_trl import prompt_for

    theirs, _, _ = trainer._tokenize_prompts([prompt_for(tokenizer, t, True) for t in texts])
    assert [list(map(int, ids)) for ids in theirs] == ours
    check_prompt_ids(trainer, tokenizer, texts, True)  # the run-time guard agrees


def test_bad_config_key_is_one_line_exit_2(tmp_path):
    proc = run_peer(tmp_path, "trainer.no_such_key=1", timeout=120)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert "trainer.no_such_key" in proc.stderr and proc.stdout == ""


def test_missing_trl_is_one_line_exit_2(tmp_path):
    code = ("import sys; sys.modules['trl'] = None\n"
            "from benchmarks.bench.peer_trl import main\nsys.exit(main([]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env=checkout_env())
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert 'pip install "asyncrl[peers]" torch==' in proc.stderr and "Traceback" not in proc.stderr
