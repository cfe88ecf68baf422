"""A runner killed mid-suite takes its cells with it: each cell starts through
benchmarks.bench.cell_guard, so none lives on under PID 1 (holding cores and its run directory)."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from benchmarks import REPO_ROOT
from benchmarks.bench.cell_guard import guarded, main

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal: Linux")

# a stand-in cell program: writes its PID, then waits far longer than the test
SLEEPER = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(120)\n"

# a runner of two such cells at once, as `python -m benchmarks ... --jobs 2` runs them
RUNNER = textwrap.dedent('''
    import functools, sys
    from pathlib import Path
    from benchmarks.bench.cells import Cell
    from benchmarks.bench.executor import run_cells
    from benchmarks.bench.runner import RUNNERS, CellRunner, run_cell

    RUNNERS["sleeper"] = CellRunner("asyncrl_test_sleeper", lambda cell, runs: [str(runs / f"{cell.name}.pid")])
    cells = [Cell(f"c{i}", "sleeper", i, "sleeper", ()) for i in range(2)]
    run_cells(cells, functools.partial(run_cell, runs_dir=Path(sys.argv[1]), env={}), jobs=2)
''')


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie has died: its parent just has not reaped it
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killing_the_runner_ends_every_cell_it_started(tmp_path, sig):
    (tmp_path / "asyncrl_test_sleeper.py").write_text(SLEEPER)
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, str(runs)], env=env)
    pid_files = [runs / "c0.pid", runs / "c1.pid"]
    try:
        assert _wait(lambda: all(p.exists() and p.read_text() for p in pid_files), 60), "cells did not start"
        cells = [int(p.read_text()) for p in pid_files]
        assert all(_alive(pid) for pid in cells)
        runner.send_signal(sig)
        runner.wait(timeout=30)
        assert _wait(lambda: not any(_alive(pid) for pid in cells), 10), f"cells outlived the runner: {cells}"
    finally:
        runner.kill()
        for p in pid_files:
            if p.exists() and p.read_text():
                try:
                    os.kill(int(p.read_text()), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_the_guard_runs_the_command_in_its_own_process_and_passes_its_exit_status(tmp_path):
    out = tmp_path / "pid"
    command = [sys.executable, "-c", f"import os, sys; open({str(out)!r}, 'w').write(str(os.getpid())); sys.exit(3)"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(guarded(command), env=env)
    assert proc.wait(timeout=30) == 3
    assert int(out.read_text()) == proc.pid  # execv: the cell is the guard's own process


def test_a_guard_whose_runner_is_gone_exits_without_running_the_command(tmp_path):
    out = tmp_path / "ran"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    # PID 1 is not the guard's parent: as if the runner had died before the guard was armed
    code = subprocess.run([sys.executable, "-m", "benchmarks.bench.cell_guard", "1", "--", sys.executable, "-c",
                           f"open({str(out)!r}, 'w')"], env=env).returncode
    assert code == 1 and not out.exists()


def test_a_call_without_its_command_is_refused_in_one_line():
    with pytest.raises(SystemExit, match="usage: python -m benchmarks.bench.cell_guard"):
        main(["1"])
