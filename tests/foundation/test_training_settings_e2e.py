"""A tiny `asyncrl train` with an lr schedule, the KL penalty, pass@k evaluations and
run.keep_checkpoints=1, as a subprocess from a local policy directory (no warm start)."""

import json
import os
import subprocess
import sys

import pytest

from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

from asyncrl.training.lr_schedule import lr_factor

TINY_MODEL = ["model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
              "model.intermediate_size=128"]


@pytest.fixture(scope="module")
def policy_dir(tiny_policy, tmp_path_factory):
    model, tok, _ = tiny_policy
    path = tmp_path_factory.mktemp("policy")
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def test_schedule_kl_pass_k_and_kept_checkpoints(tmp_path, policy_dir):
    args = [f"policy.model_path={policy_dir}", *TINY_MODEL, "run.mode=sync", "run.name=r", "run.progress=false",
            "trainer.steps=3", "trainer.lr=0.001", "trainer.n_minibatches=2", "trainer.lr_schedule=cosine",
            "trainer.warmup_steps=1", "trainer.min_lr_ratio=0.1", "trainer.kl_coef=0.1",
            "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=6",
            "eval.every=1", "eval.n_problems=3", "eval.samples=2", "eval.pass_k=[1,2]", "eval.greedy=true",
            "run.checkpoint_every=1", "run.keep_checkpoints=1"]
    proc = run_cli(["train", *args], tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "r"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert all({"eval_reward", "eval_pass_at_1", "eval_pass_at_2", "eval_greedy_reward"} <= set(r) for r in rows)
    records = [r for r in rows if r["step"] > 0]  # step 0: the evaluation before training
    assert [r["step"] for r in records] == [1, 2, 3]
    assert [r["lr"] for r in records] == pytest.approx(
        [0.001 * lr_factor(k, total=3, warmup=1, shape="cosine", min_ratio=0.1) for k in (1, 2, 3)])
    assert all(r["kl_ref"] >= 0 for r in records)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step-000003"]  # keep_checkpoints=1
