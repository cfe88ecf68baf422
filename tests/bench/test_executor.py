"""Where cells run: serially, ``jobs`` at a time, or as Ray tasks; a failure stops new cells and is
raised once the running ones finish."""

import sys
import threading
import time
from pathlib import Path

import pytest

from benchmarks.bench.executor import run_cells


def _write_cell(cell: tuple[str, str]) -> Path:
    """A stand-in cell: writes <dir>/<name> (module level, so Ray can pickle it)."""
    out_dir, name = cell
    path = Path(out_dir) / name
    if name.startswith("bad"):
        raise RuntimeError(f"cell {name} failed")
    path.write_text(name)
    return path


def test_jobs_run_at_once_and_report_every_cell(tmp_path):
    running, peak, lock = [0], [0], threading.Lock()

    def slow(cell):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return _write_cell(cell)

    done = []
    run_cells([(str(tmp_path), f"c{i}") for i in range(4)], slow, jobs=2, on_done=lambda c, p: done.append(p.name))
    assert sorted(done) == ["c0", "c1", "c2", "c3"] and peak[0] == 2


def test_serial_failure_stops_at_once(tmp_path):
    cells = [(str(tmp_path), n) for n in ("a", "bad", "c")]
    with pytest.raises(RuntimeError, match="cell bad failed"):
        run_cells(cells, _write_cell)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a"]


def test_parallel_failure_starts_nothing_new_and_raises(tmp_path):
    cells = [(str(tmp_path), n) for n in ("bad", "b", "c", "d", "e", "f")]

    def slowish(cell):
        time.sleep(0.05 if cell[1] != "bad" else 0.0)
        return _write_cell(cell)

    with pytest.raises(RuntimeError, match="cell bad failed"):
        run_cells(cells, slowish, jobs=2)
    assert len(list(tmp_path.iterdir())) < 5  # the queued cells never started


def test_bad_jobs():
    with pytest.raises(ValueError, match="--jobs"):
        run_cells([], _write_cell, jobs=0)


@pytest.mark.slow  # bench cells on a Ray cluster: make test-all
def test_ray_runs_every_cell_as_a_task(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    # Ray workers cannot import this test file by name: ship _write_cell by value (asyncrl's own
    # cell functions are importable there)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    done = []
    run_cells([(str(tmp_path), f"c{i}") for i in range(3)], _write_cell, ray=True,
              on_done=lambda c, p: done.append(p.read_text()))
    assert sorted(done) == ["c0", "c1", "c2"]
    with pytest.raises(RuntimeError, match="cell bad failed"):
        run_cells([(str(tmp_path), "bad")], _write_cell, ray=True)
