"""Where a suite's cells run: one after another, ``jobs`` at a time on this machine, or as Ray tasks.

Every cell is a self-contained unit (its own subprocess, its own run directory, done when its
``summary.json`` exists), so the three ways differ only in who starts the cells:

- ``jobs=1``: in order, here (a crash stops the suite at once);
- ``jobs=N``: N threads here, each waiting on one cell's subprocess (one torch thread per cell);
- ``ray=True``: one Ray task per cell, one CPU each, on ``RAY_ADDRESS`` or a private local cluster.
  The output directory must be on storage that every node sees (the tasks write their run
  directories there and the driver reads them back for the report).

A failed cell raises its BenchError: with ``jobs`` after the cells already running have finished
(none starts after it), on Ray at once, cancelling the rest. A rerun resumes from every cell that
finished.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TypeVar

Cell = TypeVar("Cell")


def run_cells(cells: Sequence[Cell], run_one: Callable[[Cell], Path], *, jobs: int = 1, ray: bool = False,
              on_done: Callable[[Cell, Path], None] | None = None) -> None:
    """Run ``run_one(cell)`` for every cell (``jobs`` at a time, or on Ray); ``on_done(cell, run_dir)``
    after each (on this machine, in completion order). ``run_one`` must be a module-level function
    for Ray (it is pickled to the workers)."""
    if jobs < 1:
        raise ValueError(f"--jobs: must be >= 1, got {jobs}")
    done = on_done or (lambda cell, run_dir: None)
    if ray:
        _run_on_ray(cells, run_one, done)
    elif jobs == 1:
        for cell in cells:
            done(cell, run_one(cell))
    else:
        _run_threads(cells, run_one, done, jobs)


def _run_threads(cells, run_one, done, jobs: int) -> None:
    error = None
    with ThreadPoolExecutor(max_workers=jobs) as pool:  # threads only wait on the cell processes
        pending = {pool.submit(run_one, cell): cell for cell in cells}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                cell = pending.pop(future)
                if future.exception() is not None:
                    error = error or future.exception()
                    for other in pending:  # no new cells after a failure; running ones finish
                        other.cancel()
                    continue
                done(cell, future.result())
            pending = {f: c for f, c in pending.items() if not f.cancelled()}
    if error is not None:
        raise error


def _run_on_ray(cells, run_one, done) -> None:
    try:
        import ray
    except ImportError:
        raise ValueError("--ray: Ray is not installed (pip install 'asyncrl[ray]')") from None
    owns = not ray.is_initialized()
    if owns:  # RAY_ADDRESS (a cluster) or a private local one with this machine's cores
        address = os.environ.get("RAY_ADDRESS")
        local = {} if address else {"num_cpus": os.cpu_count(), "_node_ip_address": "127.0.0.1"}
        if not address:  # the private cluster's workers inherit this environment: they import the apparatus
            from benchmarks import checkout_pythonpath  # (not installed) from this checkout

            os.environ["PYTHONPATH"] = checkout_pythonpath(os.environ.get("PYTHONPATH"))
        ray.init(address=address, include_dashboard=False, log_to_driver=False, **local)
    try:
        task = ray.remote(num_cpus=1)(run_one)
        refs = {task.remote(cell): cell for cell in cells}
        while refs:
            ready, _ = ray.wait(list(refs), num_returns=1)
            cell = refs.pop(ready[0])
            try:
                run_dir = ray.get(ready[0])
            except Exception as err:  # a RayTaskError wraps the cell's BenchError
                for ref in refs:  # queued and running cells stop; a rerun starts those over
                    ray.cancel(ref)
                raise (getattr(err, "cause", None) or err) from None
            done(cell, run_dir)
    finally:
        if owns:
            ray.shutdown()
