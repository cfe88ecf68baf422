"""TensorBoard: scalars, the staleness histogram and completion tables under ``<run dir>/tensorboard``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncrl.tracking import markdown_table


class TensorBoardTracker:
    def __init__(self, log_dir: Path, after_step: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: events of steps after the checkpoint (about to be redone) are dropped
        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=after_step + 1)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        for name, value in scalars.items():
            self.writer.add_scalar(name, value, step)

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        if not sum(counts):
            return
        seen = [i for i, n in enumerate(counts) if n]
        # one bucket per integer value (limits at i + 0.5): the plot shows exact counts per lag
        self.writer.add_histogram_raw(name, min=seen[0], max=seen[-1], num=sum(counts),
                                      sum=sum(i * n for i, n in enumerate(counts)),
                                      sum_squares=sum(i * i * n for i, n in enumerate(counts)),
                                      bucket_limits=[i + 0.5 for i in range(len(counts))],
                                      bucket_counts=list(counts), global_step=step)

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        self.writer.add_text(name, markdown_table(columns, rows), step)

    def flush(self) -> None:
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def open_tracker(run_dir: Path, cfg, after_step: int) -> TensorBoardTracker:
    return TensorBoardTracker(run_dir / "tensorboard", after_step)
