"""The README's `python -m benchmarks ...` lines (the benchmark apparatus, run from a checkout) build
and validate every cell (`--list`); its other shell lines: tests/foundation/test_readme_commands.py."""

import shlex
import sys
from pathlib import Path

import pytest

from benchmarks.bench.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from test_readme_commands import BENCH, ROOT, shell_lines  # noqa: E402

LINES = [line for line in shell_lines() if line.startswith(BENCH)]


def test_the_readme_runs_suites_with_the_new_command():
    assert len(LINES) >= 4
    assert not [line for line in shell_lines() if line.startswith("asyncrl bench")]


@pytest.mark.parametrize("line", LINES, ids=range(len(LINES)))
def test_readme_bench_command_lists_its_cells(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    args = shlex.split(line, comments=True)[len(BENCH.split()):]
    args = [str(ROOT / a) if a.startswith("benchmarks/plans/") else a for a in args]  # read from the checkout
    code = main([*args, "--list"])
    assert code == 0, f"{line}\n{capsys.readouterr().err[-2000:]}"
