"""A bench cell records the machine's load at its start and end beside its summary in results.json,
and a 1-minute load above the core count makes one warning line."""

from __future__ import annotations

import json
import sys

import benchmarks.bench.load as load_module
from benchmarks.bench import runner
from benchmarks.bench.cells import Cell
from benchmarks.bench.load import overload_warning, read_load
from benchmarks.bench.study import write_study_data

FAKE_CELL = """
import json, sys
from pathlib import Path
Path(sys.argv[1], "summary.json").write_text(json.dumps({"steps": 1, "train_wall_s": 2.0}))
"""


def test_a_cell_records_its_load_and_results_json_keeps_it(tmp_path, monkeypatch):
    (tmp_path / "fake_cell.py").write_text(FAKE_CELL)
    readings = iter([[3.5, 2.0, 1.0], [0.5, 1.5, 1.0]])  # start, end
    monkeypatch.setattr(load_module, "load_now", lambda: next(readings))
    monkeypatch.setattr(load_module.os, "cpu_count", lambda: 2)
    monkeypatch.setitem(runner.RUNNERS, "fake", runner.CellRunner(
        "fake_cell", lambda cell, runs: [str(runs / cell.name)], env={"PYTHONPATH": str(tmp_path)}))
    cell = Cell(name="c0", method="m", seed=0, params={}, overrides=(), runner="fake")
    run_dir = runner.run_cell(cell, tmp_path / "runs")
    assert read_load(run_dir) == {"cores": 2, "start": [3.5, 2.0, 1.0], "end": [0.5, 1.5, 1.0]}
    write_study_data(tmp_path, {"suite": "x", "runs": [runner.load_run(cell, run_dir)]})
    (stored,) = json.loads((tmp_path / "results.json").read_text())["runs"]
    assert stored["load"]["start"] == [3.5, 2.0, 1.0] and stored["summary"]["train_wall_s"] == 2.0
    assert sys.modules.get("fake_cell") is None  # the cell ran in its own process


def test_a_load_above_the_cores_warns_in_one_line():
    busy = overload_warning("sync-s0", {"cores": 2, "start": [3.1, 2.0, 1.0], "end": [1.0, 1.0, 1.0]})
    assert busy is not None and "\n" not in busy
    assert "sync-s0" in busy and "3.10 at its start" in busy and "2 cores" in busy and "at its end" not in busy
    both = overload_warning("c", {"cores": 2, "start": [2.5, 0, 0], "end": [4.0, 0, 0]})
    assert "2.50 at its start, 4.00 at its end" in both
    calm = {"cores": 2, "start": [2.0, 9.0, 9.0], "end": [1.9, 9.0, 9.0]}
    assert overload_warning("c", calm) is None  # the 1-minute load only, and only above the cores
    assert overload_warning("c", None) is None  # a cell from before the load was recorded
    assert overload_warning("c", {"cores": 2, "start": None, "end": None}) is None  # no getloadavg
