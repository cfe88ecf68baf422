"""Episodes as data, every ``run.log_episodes_every`` steps: ``<run dir>/episodes.jsonl``, one row per
episode played for that step (asyncrl.agents.records: each turn's text, tool calls with their
results, the environment's answers and rewards, versions, why it ended), and for the last step.
A resumed run cuts the file back to its checkpoint's step, like ``metrics.jsonl``. A run of single
completions writes none (``completions.jsonl`` holds its samples)."""

from __future__ import annotations

from pathlib import Path

from asyncrl.tracking.metrics import JsonRows

FILE = "episodes.jsonl"


class EpisodeLog:
    def __init__(self, run_dir: Path, every: int, last_step: int, after_step: int = 0):
        self.run_dir, self.every, self.last_step, self.after_step = Path(run_dir), every, last_step, after_step
        self.rows: JsonRows | None = None  # opened at the first row: a single-turn run leaves no file

    def due(self, step: int) -> bool:
        return self.every > 0 and (step % self.every == 0 or step == self.last_step)

    def write(self, step: int, records: list[dict]) -> None:
        """The step's episode rows, when the step is due."""
        if not records or not self.due(step):
            return
        if self.rows is None:
            self.rows = JsonRows(self.run_dir / FILE, self.after_step)
        for record in records:
            self.rows.append({"step": step, **record})

    def flush(self) -> None:
        if self.rows is not None:
            self.rows.flush()

    def close(self) -> None:
        if self.rows is not None:
            self.rows.close()
