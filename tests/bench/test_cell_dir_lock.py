"""A benchmark suite starts an unfinished cell over by deleting its directory: never one that a live run
holds (its run lock: tests/foundation/test_run_lock.py)."""

import sys
from pathlib import Path

import pytest

from benchmarks.bench.runner import BenchError, fresh_cell_dir

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from test_run_lock import _holder  # noqa: E402


def test_a_bench_cell_another_process_runs_is_not_deleted(tmp_path):
    """bench starts an unfinished cell over by deleting its directory: never one a live run holds."""
    cell = tmp_path / "runs" / "cell"
    holder = _holder(cell)
    try:
        (cell / "metrics.jsonl").write_text('{"step": 0}\n')
        with pytest.raises(BenchError, match=rf"cell cell: .*in use by another run \(pid {holder.pid}\)"):
            fresh_cell_dir(cell)
        assert (cell / "metrics.jsonl").exists()
    finally:
        holder.kill()
        holder.wait()
    assert fresh_cell_dir(cell) and list(cell.iterdir()) == []  # a dead attempt: started over
