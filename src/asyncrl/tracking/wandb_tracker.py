"""Weights & Biases (``pip install wandb``): a run named after the run directory, resumed by id.

Offline use: ``WANDB_MODE=offline`` (sync later with ``wandb sync``) or ``disabled``."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class WandbTracker:
    def __init__(self, run_dir: Path, cfg, after_step: int):
        import wandb

        self.wandb = wandb
        # the run directory's name is the id: a resumed run continues the same W&B run
        self.run = wandb.init(project="asyncrl", name=run_dir.name, id=run_dir.name, dir=str(run_dir),
                              config=cfg.to_dict(), resume="allow")

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.run.log(scalars, step=step)

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        import numpy as np

        edges = np.arange(len(counts) + 1) - 0.5
        self.run.log({name: self.wandb.Histogram(np_histogram=(np.asarray(counts), edges))}, step=step)

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        self.run.log({name: self.wandb.Table(columns=columns, data=rows)}, step=step)

    def flush(self) -> None:
        pass  # wandb syncs in the background

    def close(self) -> None:
        self.run.finish()


def open_tracker(run_dir: Path, cfg, after_step: int) -> WandbTracker:
    return WandbTracker(run_dir, cfg, after_step)
