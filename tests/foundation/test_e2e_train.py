"""Tiny end-to-end `asyncrl train` runs as subprocesses (seconds each)."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

import torch
from safetensors.torch import load_file

from asyncrl.config import load_config
from asyncrl.training.pretrain import pretrained_dir
from cli_forks import run_cli as forked_cli  # tests/: the CLI forked from one imported copy

TINY = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=128", "model.vocab_size=400",
    # one-step sums of digits: a 40-step warm start already solves some, so rewards vary within
    # groups and the GRPO gradient is non-zero
    "task.arithmetic.min_steps=1", "task.arithmetic.max_steps=1", "task.arithmetic.ops=+",
    "task.arithmetic.max_value=9", "task.arithmetic.n_train=70", "task.arithmetic.n_eval=4",
    "pretrain.steps=200", "pretrain.batch_size=32", "pretrain.lr=0.003", "pretrain.warmup_steps=5",
    "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=16",
    "trainer.steps=3", "trainer.n_minibatches=2", "trainer.lr=0.001",
    "eval.n_problems=8", "eval.every=2", "run.progress=false", "run.mode=sync", "pretrain.alt_style_frac=0",
]


def run_cli(tmp_path: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return forked_cli(list(args), tmp_path, env, timeout=timeout)


def test_train_end_to_end(tmp_path, cache):
    proc = run_cli(tmp_path, "train", *TINY, "run.name=e2e", "run.out_dir=runs",
                   f"policy.cache_dir={cache}", "run.checkpoint_every=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "e2e"
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("initial_eval_reward", "final_eval_reward", "steps", "wall_time_s", "mode"):
        assert key in summary
    assert summary["steps"] == 3 and summary["mode"] == "sync"
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert records[0]["eval_reward"] == summary["initial_eval_reward"]  # step 0: before training
    records = records[1:]
    assert all(math.isfinite(r["loss"]) for r in records)
    assert any(r["frac_zero_adv_groups"] < 1 for r in records), "no reward signal: test is vacuous"
    assert "eval_reward" in records[1] and "eval_reward" in records[2]
    assert (run_dir / "config.yaml").is_file()
    assert any((run_dir / "tensorboard").iterdir())
    # the checkpoint is a loadable HF directory whose weights differ from the warm start
    ckpt = run_dir / "checkpoint"
    assert (ckpt / "config.json").is_file() and (ckpt / "trainer_state.pt").is_file()
    start_dir = pretrained_dir(load_config(None, [*TINY, f"policy.cache_dir={cache}"]))
    before, after = load_file(start_dir / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    state = torch.load(ckpt / "trainer_state.pt", weights_only=False)
    assert state["step"] == 3 and state["version"] == 3 and "optimizer" in state


def test_finished_run_dir_is_not_overwritten(tmp_path, cache):
    args = ["train", *TINY, "trainer.steps=1", "run.name=x", f"policy.cache_dir={cache}", "eval.every=0"]
    assert run_cli(tmp_path, *args).returncode == 0
    again = run_cli(tmp_path, *args)
    assert again.returncode == 2
    assert "run.name" in again.stderr and "Traceback" not in again.stderr
