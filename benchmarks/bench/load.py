"""The machine's load around each bench cell: timings mean little on a machine that was busy.

``run_cell`` records ``os.getloadavg()`` (the 1, 5 and 15-minute load averages) when a cell starts
and when it ends, with the machine's core count, in ``<cell run dir>/load.json``; ``load_run``
puts it beside the cell's summary in ``results.json`` (``runs[i].load``). When the 1-minute load
at either point exceeded the core count, the bench prints one warning line under the cell's line:
other work competed for the cores, so its times are slower than the machine's.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

LOAD_FILE = "load.json"


def load_now() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, rounded; None where the platform has none."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def record_load(run_dir: Path, when: str) -> None:
    """Add the load now under ``when`` (``start`` or ``end``) to ``run_dir``'s load file."""
    path = Path(run_dir) / LOAD_FILE
    data = read_load(run_dir) or {"cores": os.cpu_count()}
    data[when] = load_now()
    path.write_text(json.dumps(data))


def read_load(run_dir: Path) -> dict | None:
    """The cell's recorded load (``{"cores", "start", "end"}``), or None (older cells have none)."""
    try:
        data = json.loads((Path(run_dir) / LOAD_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def overload_warning(cell: str, load: dict | None) -> str | None:
    """One line when the 1-minute load at the cell's start or end exceeded the core count, else None."""
    if not load or not load.get("cores"):
        return None
    cores = load["cores"]
    over = {when: load[when][0] for when in ("start", "end") if load.get(when) and load[when][0] > cores}
    if not over:
        return None
    seen = ", ".join(f"{value:.2f} at its {when}" for when, value in over.items())
    return (f"  ! {cell}: the machine's 1-minute load was {seen}, above its {cores} cores: "
            "other work competed, so its timings are slower than the machine's")
