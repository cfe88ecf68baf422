"""`asyncrl train policy.model_path=<local HF dir> task=gsm8k task.path=<local jsonl>`: the async
pipeline end to end on a tiny saved checkpoint and a GSM8K-format file built here."""

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("math_verify")


@pytest.fixture(scope="module")
def checkpoint_and_data(tmp_path_factory):
    from asyncrl.config import ModelConfig
    from asyncrl.policy.model import build_tiny_model
    from asyncrl.policy.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("gsm8k")
    rows = [{"question": f"Tom has {a} apples and buys {b} more. How many apples does he have?",
             "answer": f"He has {a} + {b} = {a + b} apples.\n#### {a + b}"}
            for a in range(1, 13) for b in range(1, 6)]
    data = root / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tok = train_tokenizer([f"Question: {r['question']}\nAnswer: {r['answer']}" for r in rows], 400, False)
    model = build_tiny_model(ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                         intermediate_size=128), tok)
    ckpt = root / "tiny-ckpt"
    model.save_pretrained(ckpt)
    tok.save_pretrained(ckpt)
    return ckpt, data


def test_gsm8k_async_end_to_end(tmp_path, checkpoint_and_data):
    ckpt, data = checkpoint_and_data
    cmd = [sys.executable, "-m", "asyncrl.cli", "train", f"policy.model_path={ckpt}", "task=gsm8k",
           f"task.path={data}", "run.mode=async", "async.max_staleness=1", "trainer.steps=3",
           "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12",
           "trainer.n_minibatches=2", "eval.n_problems=4", "eval.samples=1", "eval.every=0",
           "run.progress=false", "run.name=gsm8k"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "gsm8k"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "async" and summary["steps"] == 3
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3] and all(r["loss"] is not None for r in records[1:])
    # outputs are a standard HF directory
    from asyncrl.policy.model import load_policy
    model, tok = load_policy(run_dir / "checkpoint")
    assert model.config.model_type == "qwen2"


def test_malformed_dataset_is_one_line_error(tmp_path, checkpoint_and_data):
    ckpt, _ = checkpoint_and_data
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q2"}\n')
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", f"policy.model_path={ckpt}",
                           "task=gsm8k", f"task.path={bad}", "run.progress=false"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "bad.jsonl:2" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
