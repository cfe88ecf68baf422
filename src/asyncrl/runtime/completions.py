"""Sample completions, every ``run.log_completions_every`` steps: what the policy actually writes.

A few samples of the step's batch → ``<run dir>/completions.jsonl`` (one row per sample: step,
prompt, completion, reward, each reward function's raw value, the oldest and newest policy version
among its tokens) and a table in every tracker. A resumed run cuts the file back to its
checkpoint's step, like ``metrics.jsonl``. With ``run.print_completions=N`` (TRL's
``log_completions`` / ``num_completions_to_print``), the first N of those rows are also printed on
the console as a table (:func:`completions_table`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from asyncrl.tracking.metrics import JsonRows
from asyncrl.types import Batch

COLUMNS = ["prompt", "completion", "reward", "version_min", "version_max"]


def sample_rows(batch: Batch, tokenizer, n: int, names: Sequence[str] = ()) -> list[dict]:
    """Up to ``n`` samples spread evenly over the batch (so several prompt groups show).
    ``names``: the reward functions' names, one per column of ``batch.reward_parts``: each row
    then has ``rewards`` (name → raw value; None where the function did not apply or failed)."""
    picks = range(0, len(batch), max(1, len(batch) // n))[:n]
    rows = []
    for i in picks:
        mask = batch.completion_attention[i]  # an episode's observations belong to its text
        versions = batch.versions[i][batch.completion_mask[i]]
        rows.append({
            "prompt": tokenizer.decode(batch.prompt_ids[i][batch.prompt_mask[i]], skip_special_tokens=True),
            "completion": tokenizer.decode(batch.completion_ids[i][mask], skip_special_tokens=True),
            "reward": float(batch.rewards[i]),
            "version_min": int(versions.min()) if len(versions) else None,
            "version_max": int(versions.max()) if len(versions) else None,
        })
        parts = batch.reward_parts
        if names and parts is not None and parts.shape[1] == len(names):
            rows[-1]["rewards"] = {name: None if math.isnan(v) else v for name, v in zip(names, parts[i].tolist())}
    return rows


def _cut(text: str, keep_end: bool = False, limit: int = 300) -> str:
    """A long text cut to ``limit`` characters: its start, or its end (a prompt's question)."""
    if len(text) <= limit:
        return text
    return "…" + text[1 - limit:] if keep_end else text[:limit - 1] + "…"


def completions_table(step: int, rows: list[dict]) -> Table:
    """The rows as a rich table: prompt, completion, the reward, and each function's value."""
    names = list(rows[0].get("rewards") or {}) if rows else []
    table = Table(title=f"completions at step {step}", show_lines=True)
    for column in ("prompt", "completion"):
        table.add_column(column, overflow="fold")
    for column in ("reward", *names):
        table.add_column(column, justify="right")
    for row in rows:
        values = [row.get("rewards", {}).get(name) for name in names]
        table.add_row(_cut(row["prompt"], keep_end=True), _cut(row["completion"]), f"{row['reward']:.3f}",
                      *("-" if v is None else f"{v:.3f}" for v in values))
    return table


class CompletionLog:
    """Writes the samples of every ``every``-th step (0 = never) and of the last step;
    ``n_printed`` of them also go to the console (:meth:`printed`)."""

    def __init__(self, run_dir: Path, every: int, last_step: int, after_step: int = 0, n_samples: int = 8,
                 n_printed: int = 0):
        self.every, self.last_step, self.n_printed = every, last_step, n_printed
        self.n_samples = max(n_samples, n_printed)
        self.rows = JsonRows(Path(run_dir) / "completions.jsonl", after_step) if every > 0 else None

    def due(self, step: int) -> bool:
        return self.rows is not None and (step % self.every == 0 or step == self.last_step)

    def write(self, step: int, batch: Batch, tokenizer, metrics, names: Sequence[str] = ()) -> list[dict]:
        """Append the step's samples and return them; ``metrics``: the run's MetricsWriter (its
        trackers get the table); ``names``: the reward functions' (see :func:`sample_rows`)."""
        rows = sample_rows(batch, tokenizer, self.n_samples, names)
        for row in rows:
            self.rows.append({"step": step, **row})
        metrics.write_table(step, "completions", COLUMNS, [[row[c] for c in COLUMNS] for row in rows])
        return rows

    def printed(self, step: int, rows: list[dict]) -> Table | None:
        """The console's table of the first ``n_printed`` rows; None when none is printed."""
        return completions_table(step, rows[:self.n_printed]) if self.n_printed and rows else None

    def flush(self) -> None:
        if self.rows is not None:
            self.rows.flush()

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()
