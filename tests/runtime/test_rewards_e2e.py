"""Reward functions by import path, end to end as subprocesses on a tiny saved model: a user's
reward module outside the package trains in sync and async mode with its metric in metrics.jsonl
and TensorBoard; a function that fails inside an async rollout worker stops the run with one line
naming it; and the ``__main__`` registry pitfall is refused instead of silently diverging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TINY = ["run.progress=false", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
        "rollout.max_new_tokens=8", "trainer.n_minibatches=1", "trainer.steps=2", "eval.n_problems=2",
        "eval.samples=1", "eval.every=0", "task.arithmetic.n_train=40", "task.arithmetic.n_eval=4"]

USER_MODULE = '''
def has_marker(completions, **kwargs):
    return [1.0 if "####" in c else 0.0 for c in completions]

def short(completions, *, answer):
    return [-0.01 * len(c) for c in completions]

def fails_on_train_rollouts(completions, *, uid):
    # the gold solutions of the start-up check and every eval row pass: only the rollout workers,
    # scoring a tiny random model's train completions, meet the failure
    for c, u in zip(completions, uid):
        if u.startswith("arith-train") and "####" not in c:
            raise ValueError("no answer marker")
    return [1.0] * len(completions)
'''


def run(cwd: Path, *args: str, code: str | None = None, pythonpath: Path | None = None,
        timeout: int = 180) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    command = [sys.executable, str(code)] if code else [sys.executable, "-m", "asyncrl.cli"]
    return subprocess.run([*command, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout)


def records_and_tags(run_dir: Path) -> tuple[list[dict], set[str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    events = EventAccumulator(str(run_dir / "tensorboard"))
    events.Reload()
    return records, set(events.Tags()["scalars"])


# async (~30 s on a busy 2-core machine) is marked slow; the failing-reward test below runs async by default
@pytest.mark.parametrize("mode, how", [("sync", "file"), pytest.param("async", "module", marks=pytest.mark.slow)])
def test_a_users_reward_module_trains_with_its_metrics(tmp_path, model_dir, mode, how):
    """Outside the package: sync names it by file path, async by module path (on PYTHONPATH), so
    both resolutions run in the trainer and, in async mode, in the worker process."""
    user = tmp_path / "user_code"
    user.mkdir()
    (user / "my_rewards.py").write_text(USER_MODULE)
    funcs = (f"[{user}/my_rewards.py:has_marker, {user}/my_rewards.py:short]" if how == "file"
             else "[my_rewards:has_marker, my_rewards:short]")
    proc = run(tmp_path, "train", *TINY, f"policy.model_path={model_dir}", f"run.mode={mode}", "run.name=r",
               f"reward.funcs={funcs}", "reward.weights=[1.0, 0.5]", pythonpath=user if how == "module" else None)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records, tags = records_and_tags(tmp_path / "runs" / "r")
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2
    for r in steps:
        assert 0.0 <= r["reward/has_marker"] <= 1.0 and r["reward/short"] <= 0.0
        # the total is the weighted sum, per row and so per step mean
        assert r["reward_mean"] == pytest.approx(r["reward/has_marker"] + 0.5 * r["reward/short"], abs=1e-5)
    assert {"reward/has_marker", "reward/short"} <= tags


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_reward_failing_mid_run_is_one_line_naming_it(tmp_path, model_dir, mode):
    """async: the failure happens in the rollout worker process, which reports it to the trainer."""
    (tmp_path / "my_rewards.py").write_text(USER_MODULE)
    proc = run(tmp_path, "train", *TINY, f"policy.model_path={model_dir}", f"run.mode={mode}",
               "reward.funcs=[my_rewards.py:fails_on_train_rollouts]")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert lines[0].startswith(f"asyncrl: reward function {tmp_path}/my_rewards.py:fails_on_train_rollouts raised "
                               "ValueError: no answer marker on row uid=arith-train-"), lines[0]


PITFALL_SCRIPT = '''
import sys
from asyncrl.cli import main
from asyncrl.tasks import TASKS, ArithmeticTask


class HalfCredit(ArithmeticTask):
    def reward(self, completion, problem):
        return 0.5


if __name__ == "__main__":
    TASKS["arithmetic"] = HalfCredit  # spawned rollout workers never run this line
    sys.exit(main(sys.argv[1:]))
'''


def test_replacing_the_task_registry_under_main_is_refused(tmp_path, model_dir):
    """Before: async workers trained on the built-in reward while evaluation used HalfCredit's.
    Now the run stops at start-up with one line, in every mode, before any worker exists."""
    script = tmp_path / "train_custom.py"
    script.write_text(textwrap.dedent(PITFALL_SCRIPT))
    proc = run(tmp_path, "train", *TINY, f"policy.model_path={model_dir}", "run.mode=async", code=str(script))
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "task.name: asyncrl.tasks.TASKS['arithmetic'] was replaced after import (by __main__.HalfCredit)" \
        in lines[0]
    assert not (tmp_path / "runs").exists()
