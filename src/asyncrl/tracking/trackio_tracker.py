"""trackio (``pip install trackio``): a local, wandb-like dashboard (``trackio show``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TrackioTracker:
    def __init__(self, run_dir: Path, cfg):
        import trackio

        self.trackio = trackio
        trackio.init(project="asyncrl", name=run_dir.name, config=cfg.to_dict())

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.trackio.log(scalars, step=step)

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        self.trackio.log({f"{name}/{lag}": n for lag, n in enumerate(counts)}, step=step)

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        table = getattr(self.trackio, "Table", None)  # older trackio releases have no tables
        if table is not None:
            self.trackio.log({name: table(columns=columns, data=rows)}, step=step)

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.trackio.finish()


def open_tracker(run_dir: Path, cfg, after_step: int) -> TrackioTracker:
    return TrackioTracker(run_dir, cfg)
