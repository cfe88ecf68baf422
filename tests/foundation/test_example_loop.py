"""examples/train_loop.py — the library's parts in one readable loop — reaches the weights of
``asyncrl train run.mode=sync``: two steps from the same starting policy, config and seed, every
parameter bitwise equal (both run on this machine, with the same thread count)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parent))
from test_e2e_train import TINY, run_cli  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_loop.py"
# The conftest's untrained tiny policy (no warm start to build: seconds, not minutes) answers no
# sum, so the reward is one it varies on: the share of digits in a completion. Its groups get
# non-zero advantages, so the two steps train and the weights compared are not the starting ones.
DIGITS = ("def digit_share(completions, **kwargs):\n"
          "    return [sum(map(str.isdigit, c)) / max(1, len(c)) for c in completions]\n")


def test_example_loop_reaches_the_weights_of_asyncrl_train(tmp_path, model_dir):
    (tmp_path / "digits.py").write_text(DIGITS)
    args = [*TINY, "trainer.steps=2", "eval.every=0", "eval.n_problems=2", "run.out_dir=runs",
            f"policy.model_path={model_dir}", f"reward.funcs=[{tmp_path / 'digits.py'}:digit_share]"]
    cli = run_cli(tmp_path, "train", *args, "run.name=cli")
    assert cli.returncode == 0, cli.stderr[-3000:]
    example = subprocess.run([sys.executable, str(EXAMPLE), *args, "run.name=example"], capture_output=True,
                             text=True, cwd=tmp_path, env={**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert example.returncode == 0, example.stderr[-3000:]

    records = [json.loads(line) for line in (tmp_path / "runs" / "cli" / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in records if r["step"] > 0]
    assert any(r["frac_zero_adv_groups"] < 1 for r in trained), "no reward signal: test is vacuous"
    printed = [line for line in example.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in printed] == ["step 1", "step 2"]
    for line, record in zip(printed, trained):  # the same batches: the same rewards
        assert f"reward {record['reward_mean']:.3f}" in line

    want = load_file(tmp_path / "runs" / "cli" / "checkpoint" / "model.safetensors")
    got = load_file(tmp_path / "runs" / "example" / "model.safetensors")
    assert got.keys() == want.keys()
    assert [name for name in want if not torch.equal(got[name], want[name])] == []
