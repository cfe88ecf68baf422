"""TRL's ``None`` reward ("does not apply to this row") end to end, in sync and async mode, on a
tiny saved model: the run trains, rows every function skipped total 0 with one warning per
process, the logged rows agree with the weighted sum of the values that are there, each
function's mean is on the step line, ``run.print_completions`` prints its table, and the trackers
get TRL's metric names."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_rewards_e2e import TINY, records_and_tags, run  # noqa: E402

# both functions skip completions of odd length: those rows have no reward at all
USER_MODULE = '''
def even_len(completions, **kwargs):
    return [None if len(c) % 2 else float(len(c) > 4) for c in completions]

def even_marker(completions, **kwargs):
    return [None if len(c) % 2 else float("1" in c) for c in completions]
'''
WARNING = "asyncrl: warning: every reward function returned None on row uid="


def _check_logged_rows(run_dir: Path) -> None:
    rows = [json.loads(line) for line in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert rows
    for row in rows:
        values = row["rewards"]
        assert set(values) == {"even_len", "even_marker"}
        if all(v is None for v in values.values()):
            assert row["reward"] == 0.0  # no function applies: TRL's warning and a reward of 0
        else:
            assert None not in values.values()  # both skip the same rows
            assert row["reward"] == pytest.approx(values["even_len"] + 0.5 * values["even_marker"])
    assert any(all(v is None for v in r["rewards"].values()) for r in rows)  # else the test shows nothing


def _check_metrics(run_dir: Path) -> None:
    records, tags = records_and_tags(run_dir)
    steps = [r for r in records if r["step"] > 0]
    assert len(steps) == 2
    for r in steps:
        for name in ("even_len", "even_marker"):
            value = r[f"reward/{name}"]  # over the rows the function applies to (NaN: none this step)
            assert value is None or 0.0 <= value <= 1.0
    assert {"train/reward", "train/reward_std", "train/frac_reward_zero_std", "train/completions/mean_length",
            "train/completions/clipped_ratio", "train/rewards/even_len/mean", "train/entropy"} <= tags
    assert {"rollout/reward_mean", "reward/even_len"} <= tags  # our own names too


def test_none_rewards_in_sync_mode_with_the_console_table(tmp_path, model_dir):
    (tmp_path / "none_rewards.py").write_text(USER_MODULE)
    proc = run(tmp_path, "train", *TINY, f"policy.model_path={model_dir}", "run.mode=sync", "run.name=r",
               "rollout.prompts_per_step=4", "run.progress=true", "run.log_completions_every=1",
               "run.print_completions=3", "reward.funcs=[none_rewards.py:even_len, none_rewards.py:even_marker]",
               "reward.weights=[1.0, 0.5]")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count(WARNING) == 1, proc.stderr[-3000:]  # one process, said once
    run_dir = tmp_path / "runs" / "r"
    _check_logged_rows(run_dir)
    _check_metrics(run_dir)
    # the step line has a column per function; the table has a column per function too
    step_lines = [line for line in proc.stderr.splitlines() if line.startswith(("step 1/2 ", "step 2/2 "))]
    assert len(step_lines) == 2
    assert any(re.search(r"  reward \S+  even_len \d\.\d\d  even_marker \d\.\d\d  ", line) for line in step_lines), \
        proc.stderr[-3000:]  # (a function that applied to no row of a step has no column that step)
    assert proc.stderr.count("completions at step") == 2
    header = next(line for line in proc.stderr.splitlines() if "prompt" in line and "completion" in line)
    assert "reward" in header and "even_len" in header and "even_marker" in header


@pytest.mark.slow  # sync's run of the same rows stays in the default suite: make test-all
def test_none_rewards_in_async_mode(tmp_path, model_dir):
    """The rollout worker scores: its rows reach the trainer with the None values kept apart."""
    user = tmp_path / "user_code"
    user.mkdir()
    (user / "none_rewards.py").write_text(USER_MODULE)
    proc = run(tmp_path, "train", *TINY, f"policy.model_path={model_dir}", "run.mode=async", "run.name=r",
               "rollout.prompts_per_step=4", "run.log_completions_every=1",
               "reward.funcs=[none_rewards:even_len, none_rewards:even_marker]", "reward.weights=[1.0, 0.5]",
               pythonpath=user)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert 1 <= proc.stderr.count(WARNING) <= 2, proc.stderr[-3000:]  # the trainer, the one worker: once each
    run_dir = tmp_path / "runs" / "r"
    _check_logged_rows(run_dir)
    _check_metrics(run_dir)
