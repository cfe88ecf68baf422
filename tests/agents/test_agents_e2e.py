"""Agents end to end, as subprocesses: each built-in agent task trains; async with K = 0 equals sync
on episodes (bitwise); a custom environment and a custom tool from a module in the user's
directory train by CLI and by ``asyncrl.train``; a SIGKILL mid-run resumes bitwise in sync mode."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from cli_forks import run_cli  # tests/: the CLI forked from one imported copy


SMALL = [
    "model.hidden_size=64", "model.num_layers=2", "model.num_heads=4", "model.num_kv_heads=2",
    "model.intermediate_size=128", "model.vocab_size=400",
    "pretrain.steps=60", "pretrain.batch_size=32", "pretrain.lr=0.003", "pretrain.warmup_steps=5",
    "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "trainer.n_minibatches=2", "trainer.lr=0.001",
    "eval.n_problems=4", "eval.every=0", "run.progress=false", "run.report_to=[]",
]
GUESS = ["--config", "guess-agent", *SMALL]
CALCULATOR = ["--config", "calculator-agent", *SMALL]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def train(cwd: Path, cache: str, name: str, *args: str, env: dict | None = None):
    proc = run_cli(["train", *args, f"run.name={name}", f"policy.cache_dir={cache}"], cwd, env or ENV, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = cwd / "runs" / name
    return run_dir, rows(run_dir / "metrics.jsonl")


def rows(path: Path) -> list[dict]:
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[:text.rfind("\n") + 1].splitlines()]


def train_by_api(cwd: Path, pairs: list[str], env: dict, call: str = "asyncrl.train(overrides=overrides)",
                 prelude: str = "") -> None:
    """``call`` in a fresh interpreter: the Python API, ``pairs`` as typed overrides (as a notebook
    would pass them), after ``prelude``; it must run its 2 steps."""
    script = ("import json, yaml, asyncrl\n" + prelude +
              f"pairs = {json.dumps(pairs)}\n"
              "overrides = {k: yaml.safe_load(v) for k, v in (p.split('=', 1) for p in pairs)}\n"
              f"summary = {call}\n"
              "print(json.dumps({'steps': summary['steps']}))\n")
    proc = subprocess.run([sys.executable, "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"steps": 2}


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoint" / "model.safetensors")


def test_guess_game_trains_end_to_end_with_episode_metrics(tmp_path, cache):
    run_dir, records = train(tmp_path, cache, "guess", *GUESS, "run.mode=sync", "trainer.steps=2")
    steps = [r for r in records if r["step"] > 0]
    for key in ("episode/turns_mean", "episode/len_p90", "episode/masked_token_frac", "episode/env_time_s",
                "staleness_seq_max"):
        assert all(key in r for r in steps), key
    assert all(1 <= r["episode/turns_mean"] <= 5 for r in steps)
    completions = rows(run_dir / "completions.jsonl")
    assert any("er: " in c["completion"] for c in completions)  # the environment's "higher: / lower:" lines
    episodes = rows(run_dir / "episodes.jsonl")  # every episode of the last step (run.log_episodes_every=10)
    assert [e["step"] for e in episodes] == [2] * 8
    assert all(e["end"] in ("done", "max_turns", "episode_tokens", "template") and e["turns"] for e in episodes)
    observed = [m["content"] for e in episodes for t in e["turns"] for m in t.get("observation", [])]
    assert any("er" in text for text in observed)  # "higher" / "lower", as the environment answered


def test_calculator_task_trains_end_to_end(tmp_path, cache):
    _, records = train(tmp_path, cache, "calc", *CALCULATOR, "run.mode=sync", "trainer.steps=2")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2 and all("episode/turns_mean" in r for r in steps)


def test_async_k0_equals_sync_on_episodes(tmp_path, cache):
    # rounds: the lock-step order, so that both modes decode the same turns together (the default,
    # ready, decodes in the order environments answer: the same episodes, sampled in another order)
    sync_dir, sync_rows = train(tmp_path, cache, "sync", *GUESS, "run.mode=sync", "trainer.steps=3", "env.schedule=rounds")
    async_dir, async_rows = train(tmp_path, cache, "async", *GUESS, "run.mode=async", "async.max_staleness=0",
                                  "trainer.steps=3", "env.schedule=rounds")
    steps = [r for r in sync_rows if r["step"] > 0]
    assert sum(r["frac_zero_adv_groups"] < 1 for r in steps) >= 1, "no reward signal: the test is vacuous"
    a, b = weights(sync_dir), weights(async_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert [r.get("reward_mean") for r in sync_rows] == [r.get("reward_mean") for r in async_rows]
    assert [r.get("episode/turns_mean") for r in sync_rows] == [r.get("episode/turns_mean") for r in async_rows]


PLUGIN = '''
from asyncrl.agents import ENVIRONMENTS

ENVIRONMENTS["countdown"] = "my_agent:Countdown"
ENVIRONMENTS["broken"] = "my_agent:Broken"


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


class Countdown:
    """Three turns, a reward of 1 for a turn that writes a digit."""

    def __init__(self, turns: int = 3):
        self.turns = turns

    def reset(self, row):
        self.left = self.turns
        return row["prompt"]

    def step(self, action):
        self.left -= 1
        reward = 1.0 if any(c.isdigit() for c in action) else 0.0
        return f"{self.left} left", reward, self.left == 0, {"left": self.left}


class Broken(Countdown):
    def step(self, action):
        return {"not": "text"}, 0.0, False, {}
'''
CUSTOM = ["task=arithmetic", "run.plugins=[my_agent]", "env.name=countdown", "env.kwargs={turns: 2}",
          "env.tools=[my_agent:add]", "env.tool_schemas=none",  # the tiny model has no chat template
          "env.episode_tokens=120", "rollout.max_new_tokens=16", "trainer.steps=2"]


def test_a_custom_environment_and_tool_from_the_users_directory_train_by_cli_and_api(tmp_path, cache):
    (tmp_path / "my_agent.py").write_text(PLUGIN)
    env = {**ENV, "PYTHONPATH": str(tmp_path)}  # the user's directory, as docs/agents.md says
    # a fresh interpreter, as a user's shell starts one (the forked CLI has its sys.path already)
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *SMALL, *CUSTOM, "run.mode=async",
                           "run.name=cli", f"policy.cache_dir={cache}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = rows(tmp_path / "runs" / "cli" / "metrics.jsonl")
    # async: a step's episode metrics are those of the episodes that arrived during it (maybe none)
    steps = [r for r in records if "episode/turns_mean" in r]
    assert steps and all(1 <= r["episode/turns_mean"] and r["episode/turns_max"] <= 2 for r in steps)
    train_by_api(tmp_path, [*SMALL, *CUSTOM, "run.mode=sync", "run.name=api", f"policy.cache_dir={cache}"], env)
    api_rows = rows(tmp_path / "runs" / "api" / "metrics.jsonl")
    assert any("episode/turns_mean" in r for r in api_rows)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_broken_environment_stops_the_run_with_one_line(tmp_path, cache, mode):
    """In the trainer (sync) or a rollout worker (async): exit 2, one line naming it, no traceback."""
    (tmp_path / "my_agent.py").write_text(PLUGIN)
    env = {**ENV, "PYTHONPATH": str(tmp_path)}
    args = [arg for arg in CUSTOM if not arg.startswith("env.name")] + ["env.name=broken"]
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *SMALL, *args, f"run.mode={mode}",
                           "run.name=broken", f"policy.cache_dir={cache}"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert "environment my_agent.Broken on row uid=" in lines[-1]
    assert "step's observation is dict" in lines[-1]


def test_sigkill_mid_run_resumes_bitwise_on_episodes(tmp_path, cache):
    args = [*GUESS, "run.mode=sync", "trainer.steps=5", "run.checkpoint_every=1", "env.schedule=rounds"]
    train(tmp_path, cache, "whole", *args)
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *args, "run.name=killed",
                             f"policy.cache_dir={cache}"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 300
    while sum(r["step"] > 0 for r in rows(run_dir / "metrics.jsonl")) < 2:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "run too slow"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # during step 3's episodes, or just after
    proc.communicate()
    assert not (run_dir / "summary.json").exists()
    resumed = run_cli(["train", "--resume", str(run_dir)], tmp_path, ENV, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = weights(tmp_path / "runs" / "whole"), weights(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert rows(run_dir / "ledger.jsonl") == rows(tmp_path / "runs" / "whole" / "ledger.jsonl")
    timing = ("_s", "per_s", "util", "_mb")  # wall clock and memory: per run
    strip = [{k: v for k, v in r.items() if not any(k.endswith(t) for t in timing)}
             for r in rows(run_dir / "metrics.jsonl")]
    assert strip == [{k: v for k, v in r.items() if not any(k.endswith(t) for t in timing)}
                     for r in rows(tmp_path / "runs" / "whole" / "metrics.jsonl")]


def test_sigkill_of_an_async_run_mid_episode_loses_and_repeats_no_episode(tmp_path, cache):
    """Killed while its worker plays episodes (in flight: admitted, not returned), the resumed run
    issues them again: the ledger holds every group exactly once, without a gap."""
    args = [*GUESS, "run.mode=async", "trainer.steps=5", "run.checkpoint_every=1"]
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *args, "run.name=killed",
                             f"policy.cache_dir={cache}"], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    run_dir = tmp_path / "runs" / "killed"
    deadline = time.monotonic() + 300
    while sum(r["step"] > 0 for r in rows(run_dir / "metrics.jsonl")) < 2:
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "run too slow"
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    resumed = run_cli(["train", "--resume", str(run_dir)], tmp_path, ENV, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    ledger = rows(run_dir / "ledger.jsonl")
    assert [r["step"] for r in ledger] == [1, 2, 3, 4, 5]
    groups = [g for r in ledger for g in r["consumed"] + r["dropped"]]
    assert sorted(groups) == list(range(len(groups)))


@pytest.mark.slow  # a Ray cluster's start-up; the local backend's K = 0 test above is in the default suite
def test_ray_backend_plays_episodes_like_sync(tmp_path, cache):
    pytest.importorskip("ray")
    sync_dir, _ = train(tmp_path, cache, "sync", *GUESS, "run.mode=sync", "trainer.steps=2", "env.schedule=rounds")
    ray_dir, records = train(tmp_path, cache, "ray", *GUESS, "run.mode=async", "async.backend=ray",
                             "async.max_staleness=0", "trainer.steps=2", "env.schedule=rounds")
    a, b = weights(sync_dir), weights(ray_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert any("episode/turns_mean" in r for r in records)
