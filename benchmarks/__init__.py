"""The project's benchmark and study apparatus, run from a checkout of the repository (it is not part
of the installed ``asyncrl`` package): ``python -m benchmarks SUITE ...`` runs a suite
(:mod:`benchmarks.bench`), ``python -m benchmarks.control`` one classic-control run
(:mod:`benchmarks.control`). The scripts beside this file are one-off studies and campaigns."""

import os
from pathlib import Path

# the checkout's root: the folder whose ``benchmarks`` this is, put on PYTHONPATH for the cells that run
# in processes of their own (python -m benchmarks.bench.peer_trl, python -m benchmarks.control)
REPO_ROOT = Path(__file__).resolve().parent.parent


def checkout_pythonpath(current: str | None) -> str:
    """``PYTHONPATH`` for a process of a benchmark (a cell, a Ray worker): the checkout's root first,
    so that it imports this apparatus, which is not installed."""
    return os.pathsep.join([str(REPO_ROOT), *([current] if current else [])])
