"""The progress display (plain lines outside a terminal, the live line in one), sample completion
rows and the per-run report.html on hand-made run files."""

import io
import json
import re

import torch
from rich.console import Console

from asyncrl.core.progress import TrainProgress, step_fields
from asyncrl.runtime.completions import CompletionLog, sample_rows
from asyncrl.runtime.run_report import staleness_counts, write_run_report, write_run_report_safely
from asyncrl.types import Batch

RECORD = {"reward_mean": 0.53125, "eval_reward": 0.47, "staleness_token_mean": 1.24, "staleness_token_max": 3,
          "trainer_wait_s": 0.412, "dropped_samples": 2, "step_time_s": 2.0, "throughput_tokens_per_s": 1234.5,
          "ess_frac": 0.91, "elapsed_s": 67.2}


def test_step_fields_hand_worked():
    assert step_fields(RECORD, batch_size=64) == [
        ("reward", "0.531"), ("eval", "0.470"), ("stale", "1.2/3"), ("wait", "0.41s"), ("dropped", "2"),
        ("samples/s", "32.0"), ("tok/s", "1,234"), ("ess", "0.91")]
    assert step_fields({"reward_mean": None, "eval_reward": float("nan")}) == []
    # the warm start reports its SFT loss under its own name, not as a reward
    assert step_fields({"sft_loss": 2.5, "reward_mean": None}) == [("sft loss", "2.500")]


def test_plain_lines_outside_a_terminal():
    out = io.StringIO()
    progress = TrainProgress(200, "async/decoupled", console=Console(file=out, force_terminal=False, width=40),
                             batch_size=64)
    with progress:
        progress.phase("starting 2 rollout workers")
        progress.step(12, RECORD)
        progress.step(13, {**RECORD, "eval_reward": None})
    lines = out.getvalue().splitlines()
    assert lines[0] == "async/decoupled: starting 2 rollout workers"
    # one physical line per step, whatever the width: nothing wrapped or cut
    assert lines[1] == ("step 12/200  reward 0.531  eval 0.470  stale 1.2/3  wait 0.41s  dropped 2  samples/s 32.0"
                        "  tok/s 1,234  ess 0.91  elapsed 0:01:07")
    assert lines[2].startswith("step 13/200  reward 0.531  stale") and len(lines) == 3


def test_live_line_shows_staleness_wait_and_dropped():
    out = io.StringIO()
    progress = TrainProgress(200, "async/decoupled", console=Console(file=out, force_terminal=True, width=250),
                             batch_size=64)
    with progress:
        progress.step(12, RECORD)
        progress.progress.refresh()
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", out.getvalue())  # drop colours and cursor moves
    assert "stale 1.2/3" in text and "wait 0.41s" in text and "dropped 2" in text and "12/200" in text
    assert "step 12/200" not in text  # the live line, not plain lines


def test_disabled_progress_prints_nothing():
    out = io.StringIO()
    progress = TrainProgress(5, "x", enabled=False, console=Console(file=out, force_terminal=False))
    with progress:
        progress.phase("loading model")
        progress.step(1, RECORD)
    assert out.getvalue() == ""


def _batch() -> Batch:
    ids = torch.tensor([[5, 6, 0], [7, 8, 9]])
    return Batch(prompt_ids=torch.tensor([[0, 1], [1, 2]]), prompt_mask=torch.tensor([[False, True], [True, True]]),
                 completion_ids=ids, completion_mask=torch.tensor([[True, True, False], [True, True, True]]),
                 behav_logp=torch.zeros(2, 3), versions=torch.tensor([[4, 5, -1], [3, 3, 3]]),
                 rewards=torch.tensor([1.0, 0.0]), group_ids=torch.tensor([0, 0]), advantages=torch.zeros(2))


class Tok:
    def decode(self, ids, skip_special_tokens=True):
        return " ".join(str(int(i)) for i in ids)


def test_sample_rows_hand_worked():
    rows = sample_rows(_batch(), Tok(), 8)
    assert rows == [{"prompt": "1", "completion": "5 6", "reward": 1.0, "version_min": 4, "version_max": 5},
                    {"prompt": "1 2", "completion": "7 8 9", "reward": 0.0, "version_min": 3, "version_max": 3}]
    assert len(sample_rows(_batch(), Tok(), 1)) == 1


def test_completion_log_every_n_and_last_step(tmp_path):
    class Metrics:
        tables = []

        def write_table(self, step, name, columns, rows):
            self.tables.append((step, name, len(rows)))

    log = CompletionLog(tmp_path, every=2, last_step=5)
    assert [s for s in range(1, 6) if log.due(s)] == [2, 4, 5]
    log.write(2, _batch(), Tok(), Metrics())
    log.close()
    rows = [json.loads(x) for x in (tmp_path / "completions.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 2] and Metrics.tables == [(2, "completions", 2)]
    assert not CompletionLog(tmp_path / "off", every=0, last_step=5).due(5)


def _run_dir(tmp_path, steps=200):
    rows = [{"step": 0, "eval_reward": 0.3, "elapsed_s": 0.1}]
    for s in range(1, steps + 1):
        rows.append({"step": s, "reward_mean": 0.3 + s / 1000, "staleness_token_hist": [50, 30, 2],
                     "generator_util": 0.9, "trainer_util": 0.5, **({"eval_reward": 0.4} if s % 50 == 0 else {})})
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"step": 20')
    (tmp_path / "completions.jsonl").write_text(json.dumps(
        {"step": 200, "prompt": "Q: 2+2? <b>", "completion": "4", "reward": 1.0, "version_min": 198,
         "version_max": 199}) + "\n")
    return {"mode": "async", "loss": "decoupled", "prox": "loglinear", "steps": steps, "initial_eval_reward": 0.3,
            "final_eval_reward": 0.4, "train_wall_s": 100.0, "gen_time_per_step_s": 0.8,
            "train_time_per_step_s": 0.5, "wait_time_per_step_s": 0.01, "weight_publish_per_step_s": 0.002,
            "weight_pull_per_step_s": 0.003}


def test_run_report_is_self_contained(tmp_path):
    """(Its time is a benchmark's business: a wall-clock bound failed here beside a CPU-bound load.)"""
    summary = _run_dir(tmp_path)
    path = write_run_report(tmp_path, summary)
    page = path.read_text()
    assert page.count("data:image/png;base64,") == 4  # reward, staleness, time split, utilisation
    assert "Q: 2+2? &lt;b&gt;" in page and "198–199" in page and "0.300 before → 0.400 after" in page
    assert not list(tmp_path.glob("*.tmp"))


def test_staleness_counts_sum_over_steps():
    assert staleness_counts([{"staleness_token_hist": [1, 2]}, {"staleness_token_hist": [0, 0, 5]}, {}]) == [1, 2, 5]


def test_report_failure_is_one_warning_not_an_error(tmp_path):
    said = []
    assert write_run_report_safely(tmp_path / "missing" / "dir", {}, log=said.append) is None
    assert len(said) == 1 and said[0].startswith("warning: report.html not written")
