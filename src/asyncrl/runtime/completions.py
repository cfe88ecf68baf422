"""Sample completions, every ``run.log_completions_every`` steps: what the policy actually writes.

A few samples of the step's batch → ``<run dir>/completions.jsonl`` (one row per sample: step,
prompt, completion, reward, the oldest and newest policy version among its tokens) and a table in
every tracker. A resumed run cuts the file back to its checkpoint's step, like ``metrics.jsonl``.
"""

from __future__ import annotations

from pathlib import Path

from asyncrl.tracking.metrics import JsonRows
from asyncrl.types import Batch

COLUMNS = ["prompt", "completion", "reward", "version_min", "version_max"]


def sample_rows(batch: Batch, tokenizer, n: int) -> list[dict]:
    """Up to ``n`` samples spread evenly over the batch (so several prompt groups show)."""
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
    return rows


class CompletionLog:
    """Writes the samples of every ``every``-th step (0 = never) and of the last step."""

    def __init__(self, run_dir: Path, every: int, last_step: int, after_step: int = 0, n_samples: int = 8):
        self.every, self.last_step, self.n_samples = every, last_step, n_samples
        self.rows = JsonRows(Path(run_dir) / "completions.jsonl", after_step) if every > 0 else None

    def due(self, step: int) -> bool:
        return self.rows is not None and (step % self.every == 0 or step == self.last_step)

    def write(self, step: int, batch: Batch, tokenizer, metrics) -> None:
        """Append the step's samples; ``metrics``: the run's MetricsWriter (its trackers get the table)."""
        rows = sample_rows(batch, tokenizer, self.n_samples)
        for row in rows:
            self.rows.append({"step": step, **row})
        metrics.write_table(step, "completions", COLUMNS, [[row[c] for c in COLUMNS] for row in rows])

    def flush(self) -> None:
        if self.rows is not None:
            self.rows.flush()

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()
