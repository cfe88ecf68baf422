"""The no-learning-signal warning: once, in one line, after WINDOW steps of empty completions or of
zero advantage everywhere; never on a healthy stream."""

from __future__ import annotations

import json
import os

import torch
from cli_forks import run_cli  # tests/: the CLI forked from one imported copy

from asyncrl.runtime.signal_check import WINDOW, NoSignalMonitor, empty_completion_frac
from asyncrl.types import Batch

HEALTHY = {"empty_completion_frac": 0.0, "frac_zero_adv_groups": 0.25, "reward_mean": 0.4}
EMPTY = {"empty_completion_frac": 1.0, "frac_zero_adv_groups": 1.0, "reward_mean": 0.0}
FLAT = {"empty_completion_frac": 0.0, "frac_zero_adv_groups": 1.0, "reward_mean": 0.0}


def _warnings(stream: list[dict]) -> list[tuple[int, str]]:
    monitor = NoSignalMonitor()
    return [(step, w) for step, record in enumerate(stream, start=1) if (w := monitor.update(record)) is not None]


def test_empty_completions_warn_once_with_the_likely_cause():
    warnings = _warnings([HEALTHY] * 3 + [EMPTY] * 30)
    assert len(warnings) == 1
    step, line = warnings[0]
    assert step == 3 + WINDOW and "\n" not in line
    assert "every sampled completion is empty" in line and "policy.model_path" in line


def test_zero_reward_spread_warns_once_naming_the_reward():
    warnings = _warnings([FLAT] * 30)
    assert [step for step, _ in warnings] == [WINDOW]
    assert "zero reward spread" in warnings[0][1] and "mean reward 0.00" in warnings[0][1]


def test_a_healthy_run_and_interrupted_stretches_never_warn():
    assert _warnings([HEALTHY] * 50) == []
    # WINDOW - 1 bad steps, then one with a signal, over and over: never WINDOW in a row
    assert _warnings(([EMPTY] * (WINDOW - 1) + [HEALTHY]) * 10) == []
    assert _warnings(([FLAT] * (WINDOW - 1) + [HEALTHY]) * 10) == []
    assert _warnings([{"reward_mean": 0.0}] * 20) == []  # a step without the keys counts as a signal


def _batch(completions: list[list[int]], width: int = 4, pad: int = 0) -> Batch:
    ids = torch.full((len(completions), width), pad)
    mask = torch.zeros((len(completions), width), dtype=torch.bool)
    for i, row in enumerate(completions):
        ids[i, :len(row)] = torch.tensor(row)
        mask[i, :len(row)] = True
    n = len(completions)
    return Batch(prompt_ids=torch.ones((n, 2), dtype=torch.long), prompt_mask=torch.ones((n, 2), dtype=torch.bool),
                 completion_ids=ids, behav_logp=torch.zeros((n, width)),
                 versions=torch.zeros((n, width), dtype=torch.long),
                 completion_mask=mask, rewards=torch.zeros(n), group_ids=torch.zeros(n, dtype=torch.long),
                 advantages=torch.zeros(n))


def test_an_empty_completion_is_one_with_no_token_but_special_ones():
    eos, pad = 2, 0
    assert empty_completion_frac(_batch([[eos], [eos], [7, eos], [5, 6, 7, 8]], pad=pad), [pad, eos]) == 0.5
    assert empty_completion_frac(_batch([[eos], [eos, pad]], pad=pad), [pad, eos]) == 1.0


def test_a_run_whose_reward_never_varies_says_so_once(tmp_path, model_dir):
    """The loop's check, end to end: a reward that scores every completion 0 for WINDOW + 2 steps."""
    rows = [{"prompt": f"Q: What is {i} + 1?\nA:", "target": str(i + 1)} for i in range(12)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "flat.py").write_text("def zero(completions, **kw):\n    return [0.0] * len(completions)\n")
    args = ["train", f"task.path={tmp_path / 'rows.jsonl'}", f"reward.funcs={tmp_path / 'flat.py'}:zero",
            f"policy.model_path={model_dir}", "run.mode=sync", "run.progress=false", "run.report_to=[]",
            "run.report=false", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
            "rollout.max_new_tokens=4", f"trainer.steps={WINDOW + 2}", "trainer.n_minibatches=1",
            "eval.n_problems=1", "eval.samples=1", "eval.every=0", "task.eval_fraction=0.25", "run.name=r"]
    proc = run_cli(args, tmp_path, {**os.environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "no learning signal" in line]
    assert lines == [f"asyncrl: step {WINDOW}: warning: no learning signal for {WINDOW} steps: all groups have "
                     f"zero reward spread (mean reward 0.00): the reward does not separate a prompt's samples, "
                     f"so the gradient is 0; check the reward on a few completions (completions.jsonl), or the "
                     f"prompts' difficulty"]
    records = [json.loads(line) for line in (tmp_path / "runs" / "r" / "metrics.jsonl").read_text().splitlines()]
    assert all("empty_completion_frac" in r for r in records if r["step"] > 0)
