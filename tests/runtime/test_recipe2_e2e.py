"""README recipe 2 end to end: examples/recipe2 copied into a scratch directory and the README's own
command run there as a subprocess, on the embedded model without a checkpoint. Its rows carry no
worked solutions, so the run starts from the general warm start (the arithmetic task's, shared
through the session cache) and must learn: completions that are not empty, reward above 0 (a few
steps on the tiny test model, default suite), eval reward rising over the whole recipe (slow)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "examples" / "recipe2"


def readme_command() -> list[str]:
    """The `asyncrl train` line that follows README's `cd examples/recipe2`, split into words."""
    block = next(body for body in re.findall(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
                 if "cd examples/recipe2" in body)
    lines = [line.strip() for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    words = shlex.split(lines[lines.index("cd examples/recipe2") + 1], comments=True)
    assert words[:2] == ["asyncrl", "train"], words
    return words[1:]


def run_recipe(tmp_path: Path, cache: str, *extra: str, timeout: int) -> tuple[subprocess.CompletedProcess, Path]:
    """Run the README command (plus ``extra``) in a copy of examples/recipe2; (process, run dir)."""
    work = tmp_path / "recipe2"
    shutil.copytree(RECIPE, work, ignore=shutil.ignore_patterns("runs", "__pycache__"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "ASYNCRL_CACHE": cache}
    env.pop("PYTHONPATH", None)  # my_rewards is found in the current directory, as a user's would be
    script = Path(sys.executable).parent / "asyncrl"  # the console script, as the README runs it
    command = [str(script)] if script.is_file() else [sys.executable, "-m", "asyncrl.cli"]
    proc = subprocess.run([*command, *readme_command(), *extra], capture_output=True, text=True, cwd=work,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = (work / "runs").iterdir()
    return proc, run_dir


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_recipe2_rows_train_from_the_general_warm_start(tmp_path, cache):
    """On the tiny test model (TINY: the warm start test_e2e_train builds), two sync steps."""
    proc, run_dir = run_recipe(tmp_path, cache, *TINY, "rollout.prompts_per_step=8", "trainer.steps=2",
                               "eval.every=0", "run.log_completions_every=1", "run.report=false",
                               "run.report_to=[]", timeout=600)
    assert "general warm start" in proc.stderr and "no learning signal" not in proc.stderr
    steps = [r for r in _rows(run_dir / "metrics.jsonl") if r["step"] > 0]
    assert len(steps) == 2
    assert all(r["empty_completion_frac"] < 0.5 for r in steps), steps
    assert sum(r["reward_mean"] for r in steps) > 0, "the general warm start answers none of the recipe's rows"
    completions = _rows(run_dir / "completions.jsonl")
    assert completions and sum(bool(c["completion"].strip()) for c in completions) > len(completions) / 2
    assert any("####" in c["completion"] for c in completions)


@pytest.mark.slow
def test_readme_recipe2_as_written_raises_eval_reward(tmp_path, cache):
    """The README command as written: the default model, its warm start (built once per cache) and
    200 steps; minutes on a CPU."""
    proc, run_dir = run_recipe(tmp_path, cache, timeout=3600)
    assert "general warm start" in proc.stderr
    evals = [r["eval_reward"] for r in _rows(run_dir / "metrics.jsonl") if "eval_reward" in r]
    assert len(evals) >= 3
    assert evals[-1] > evals[0] + 0.1, evals
