"""Experiment trackers (``run.report_to``): where a run's metrics go besides ``metrics.jsonl``.

:data:`TRACKERS` maps each ``run.report_to`` name to a :class:`TrackerEntry`: the import path of
its ``open_tracker(run_dir, cfg, after_step)`` and the package it needs. Its module is imported
only when a run asks for it, so wandb, mlflow and trackio stay optional; one whose package is
missing is refused when the configuration loads (:func:`check_available`), with what to install.
A new tracker is one file plus one entry: a line here, or, from outside the package, a plugin
module named in ``run.plugins`` (imported before ``run.report_to`` is checked)::

    from asyncrl.tracking import TRACKERS, TrackerEntry
    TRACKERS["mine"] = TrackerEntry("my_pkg.tracker:open_tracker")

Every tracker receives namespaced names (``asyncrl.tracking.names``), never the flat record keys.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from asyncrl.core.import_path import resolve
from asyncrl.core.loader import ConfigError
from asyncrl.core.registry import Registry
from asyncrl.core.user_code import first_line


class Tracker(Protocol):
    """What the run tells a tracker. ``step`` is the training step (0 = before training)."""

    def log_scalars(self, step: int, scalars: dict[str, float]) -> None: ...

    def log_histogram(self, step: int, name: str, counts: list[int]) -> None:
        """``counts[i]``: how many items have value ``i`` (e.g. tokens ``i`` versions stale)."""

    def log_table(self, step: int, name: str, columns: list[str], rows: list[list[Any]]) -> None: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TrackerEntry:
    """One ``run.report_to`` backend."""

    target: str  # "module:attr" of open_tracker(run_dir, cfg, after_step) -> Tracker
    package: str | None = None  # the module it imports, checked at config load; None = nothing to check
    pip: str | None = None  # what to install when that package is missing


TRACKERS: Registry[TrackerEntry] = Registry("run.report_to", {
    "tensorboard": TrackerEntry("asyncrl.tracking.tensorboard_tracker:open_tracker", "tensorboard", "tensorboard"),
    "wandb": TrackerEntry("asyncrl.tracking.wandb_tracker:open_tracker", "wandb", "wandb"),
    "mlflow": TrackerEntry("asyncrl.tracking.mlflow_tracker:open_tracker", "mlflow", "mlflow"),
    "trackio": TrackerEntry("asyncrl.tracking.trackio_tracker:open_tracker", "trackio", "trackio"),
})


def check_available(names: list[str]) -> None:
    """ValueError ("report_to: ...", one line) for an unknown backend or one whose package is missing."""
    for name in names:
        why = TRACKERS.why_not(name)
        if why is not None:  # "report_to: ..." (not the registry's kind): callers name the section
            raise ValueError(f"report_to: {why}")
        entry = TRACKERS[name]
        if entry.package is not None and importlib.util.find_spec(entry.package) is None:
            raise ValueError(f"report_to: {name} needs the {entry.package!r} package, which is not "
                             f"installed (pip install {entry.pip or entry.package})")
    if len(set(names)) != len(names):
        raise ValueError(f"report_to: a tracker is listed twice: {names}")


def open_trackers(names: list[str], run_dir: Path, cfg, after_step: int = 0) -> list[Tracker]:
    """One open tracker per name. ``after_step``: a resumed run's checkpoint step (later events
    written before the run was killed are superseded)."""
    out: list[Tracker] = []
    for name in names:
        try:
            out.append(resolve(TRACKERS[name].target)(Path(run_dir), cfg, after_step))
        except Exception as err:  # noqa: BLE001 (the backend's own setup error, e.g. a tracking URI it refuses)
            for tracker in out:
                tracker.close()
            raise ConfigError("run.report_to", f"{name} could not start: {first_line(err)}") from None
    return out


def markdown_table(columns: list[str], rows: list[list[Any]]) -> str:
    """A Markdown table (TensorBoard's text plugin renders it); pipes and newlines escaped."""
    def cell(value: Any) -> str:
        text = f"{value:.3g}" if isinstance(value, float) else str(value)
        return text.replace("|", "\\|").replace("\n", " ⏎ ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
