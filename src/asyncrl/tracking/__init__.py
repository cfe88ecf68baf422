"""Experiment trackers (``run.report_to``): where a run's metrics go besides ``metrics.jsonl``.

A tracker is one file here and one line in :data:`TRACKERS`; its module is imported only when a run
asks for it, so wandb, mlflow and trackio stay optional. A backend whose package is missing is
refused when the configuration loads (:func:`check_available`), with the pip package to install.

Every tracker receives namespaced names (``asyncrl.tracking.names``), never the flat record keys.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from asyncrl.core.loader import ConfigError


class Tracker(Protocol):
    """What the run tells a tracker. ``step`` is the training step (0 = before training)."""

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None: ...

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        """``counts[i]``: how many items have value ``i`` (e.g. tokens ``i`` versions stale)."""

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class Backend:
    module: str  # asyncrl.tracking.<module> holds ``open_tracker(run_dir, cfg, after_step)``
    package: str  # the module the backend imports (its presence is checked at config load)
    pip: str  # what to install when it is missing


TRACKERS: dict[str, Backend] = {
    "tensorboard": Backend("tensorboard_tracker", "tensorboard", "tensorboard"),
    "wandb": Backend("wandb_tracker", "wandb", "wandb"),
    "mlflow": Backend("mlflow_tracker", "mlflow", "mlflow"),
    "trackio": Backend("trackio_tracker", "trackio", "trackio"),
}


def check_available(names: list[str]) -> None:
    """ValueError ("report_to: ...", one line) for an unknown backend or one whose package is missing."""
    for name in names:
        if name not in TRACKERS:
            raise ValueError(f"report_to: unknown tracker {name!r} (known: {', '.join(sorted(TRACKERS))})")
        backend = TRACKERS[name]
        if importlib.util.find_spec(backend.package) is None:
            raise ValueError(f"report_to: {name} needs the {backend.package!r} package, which is not "
                             f"installed (pip install {backend.pip})")
    if len(set(names)) != len(names):
        raise ValueError(f"report_to: a tracker is listed twice: {names}")


def open_trackers(names: list[str], run_dir: Path, cfg, after_step: int = 0) -> list[Tracker]:
    """One open tracker per name. ``after_step``: a resumed run's checkpoint step (later events
    written before the run was killed are superseded)."""
    out: list[Tracker] = []
    for name in names:
        module = importlib.import_module(f"asyncrl.tracking.{TRACKERS[name].module}")
        try:
            out.append(module.open_tracker(Path(run_dir), cfg, after_step))
        except Exception as err:  # noqa: BLE001 (the backend's own setup error, e.g. a tracking URI it refuses)
            for tracker in out:
                tracker.close()
            first_line = (str(err).strip().splitlines() or [""])[0]
            raise ConfigError("run.report_to", f"{name} could not start: {type(err).__name__}: "
                                               f"{first_line}") from None
    return out


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (TensorBoard's text plugin renders it); pipes and newlines escaped."""
    def cell(value: Any) -> str:
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ⏎ ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
