"""MLflow (``pip install mlflow``): metrics to the tracking URI MLflow is configured with
(``MLFLOW_TRACKING_URI``; default ``./mlruns``), tables as JSON artifacts. MLflow has no histogram
type: the staleness histogram goes as one metric per lag (``staleness/hist/<lag>``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class MlflowTracker:
    def __init__(self, run_dir: Path, cfg):
        import mlflow

        self.mlflow = mlflow
        mlflow.set_experiment("asyncrl")
        self.run = mlflow.start_run(run_name=run_dir.name)
        flat = {}
        for section, values in cfg.to_dict().items():
            for key, value in (values or {}).items():
                flat[f"{section}.{key}"] = str(value)[:500]  # MLflow caps parameter values
        mlflow.log_params(flat)

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None:
        self.mlflow.log_metrics(scalars, step=step)

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        self.mlflow.log_metrics({f"{name}/{lag}": n for lag, n in enumerate(counts)}, step=step)

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None:
        data = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
        self.mlflow.log_table(data, artifact_file=f"{name.replace('/', '_')}_step{step:06d}.json")

    def flush(self) -> None:
        pass

    def close(self) -> None:
        self.mlflow.end_run()


def open_tracker(run_dir: Path, cfg, after_step: int) -> MlflowTracker:
    return MlflowTracker(run_dir, cfg)
