"""The console for TRL users: each reward function's mean on the step line when there are two or
more, and ``run.print_completions`` (TRL's ``log_completions``): the logged sample rows, with each
function's value, as a rich table."""

from __future__ import annotations

import io
import json
import math

import pytest
import torch
from rich.console import Console

from asyncrl.config import ConfigError, load_config
from asyncrl.core.progress import TrainProgress, step_fields
from asyncrl.runtime.completions import CompletionLog, sample_rows
from asyncrl.types import Batch


def test_the_step_line_shows_each_reward_function_when_there_are_two():
    record = {"reward_mean": 0.62, "reward/hit": 0.41, "reward/format_is_right_long": 0.9, "reward/errors": 1,
              "reward_std/hit": 0.5, "eval_reward": 0.47}
    assert step_fields(record) == [("reward", "0.620"), ("hit", "0.41"), ("format_is_r…", "0.90"), ("eval", "0.470")]
    one = {"reward_mean": 0.62, "reward/hit": 0.62, "reward/errors": 0}
    assert step_fields(one) == [("reward", "0.620")]  # one function: its mean is the reward
    # a function that applied to no row this step (NaN) is left out
    assert ("fmt", "nan") not in step_fields({"reward_mean": 0.5, "reward/hit": 0.5, "reward/fmt": math.nan})


def test_the_plain_step_line_with_two_functions():
    out = io.StringIO()
    progress = TrainProgress(20, "sync/decoupled", console=Console(file=out, force_terminal=False, width=80))
    with progress:
        progress.step(3, {"reward_mean": 0.625, "reward/hit": 0.41, "reward/fmt": 0.9, "elapsed_s": 5.0})
    assert out.getvalue().strip() == "step 3/20  reward 0.625  hit 0.41  fmt 0.90  elapsed 0:00:05"


class Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)


def _batch() -> Batch:
    n = 4
    return Batch(prompt_ids=torch.arange(n).view(n, 1), prompt_mask=torch.ones(n, 1, dtype=torch.bool),
                 completion_ids=torch.arange(10, 10 + 2 * n).view(n, 2),
                 completion_mask=torch.ones(n, 2, dtype=torch.bool),
                 behav_logp=torch.zeros(n, 2), versions=torch.ones(n, 2, dtype=torch.long),
                 rewards=torch.tensor([1.5, 0.0, 1.0, 0.5]), group_ids=torch.tensor([0, 0, 1, 1]),
                 advantages=torch.zeros(n),
                 reward_parts=torch.tensor([[1.0, 1.0], [math.nan, math.nan], [1.0, math.nan], [0.0, 1.0]]))


def test_logged_rows_carry_each_functions_value(tmp_path):
    rows = sample_rows(_batch(), Tok(), 4, ["hit", "fmt"])
    assert [r["rewards"] for r in rows] == [{"hit": 1.0, "fmt": 1.0}, {"hit": None, "fmt": None},
                                            {"hit": 1.0, "fmt": None}, {"hit": 0.0, "fmt": 1.0}]
    assert "rewards" not in sample_rows(_batch(), Tok(), 4)[0]  # without names, as before


def test_print_completions_prints_the_first_rows_of_the_logged_ones(tmp_path):
    class Metrics:
        def write_table(self, step, name, columns, rows):
            pass

    log = CompletionLog(tmp_path, every=5, last_step=20, n_printed=2)
    rows = log.write(5, _batch(), Tok(), Metrics(), ["hit", "fmt"])
    log.close()
    assert len(rows) == 4  # up to 8 are logged; the table shows the first 2
    logged = [json.loads(line) for line in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert logged[1]["rewards"] == {"hit": None, "fmt": None}
    out = io.StringIO()
    progress = TrainProgress(20, "x", console=Console(file=out, force_terminal=False, width=100))
    progress.show(log.printed(5, rows))
    text = out.getvalue()
    assert "completions at step 5" in text
    header = next(line for line in text.splitlines() if "prompt" in line)
    assert [c.strip() for c in header.strip("┃│ ").split("┃")] == ["prompt", "completion", "reward", "hit", "fmt"]
    body = [line for line in text.splitlines() if line.startswith("│")]
    assert len(body) == 2  # one line per row here
    assert [c.strip() for c in body[1].strip("│").split("│")] == ["1", "12 13", "0.000", "-", "-"]
    assert CompletionLog(tmp_path, every=5, last_step=20).printed(5, rows) is None  # n_printed 0


def test_more_rows_printed_than_the_default_eight_are_logged(tmp_path):
    assert CompletionLog(tmp_path, every=5, last_step=20, n_printed=12).n_samples == 12


def test_print_completions_needs_the_steps_it_prints_at():
    assert load_config(None, ["run.print_completions=4"]).run.print_completions == 4
    with pytest.raises(ConfigError, match=r"run\.print_completions: prints at the steps of run\.log_completions_every"):
        load_config(None, ["run.print_completions=4", "run.log_completions_every=0"])
    with pytest.raises(ConfigError, match=r"run\.print_completions: must be >= 0"):
        load_config(None, ["run.print_completions=-1"])
