"""``--merge``: a study run in parts (``--only-seeds``) joins into the study one command would have
made, and parts that are not one study's are refused in one line with nothing written."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench.merge import merge_studies, merged_results
from benchmarks.bench.runner import BenchError
from benchmarks.bench.study import RESULTS_FILE, load_study, write_study_data
from benchmarks.bench.suites import build_cells

ROOT = Path(__file__).resolve().parents[2]
WHOLE = ROOT / "benchmarks" / "results" / "2026-11-27-screen-k64"  # a committed study: 7 arms x 4 seeds


def _split(tmp_path: Path, seeds_a: set[int]) -> tuple[Path, Path]:
    """The committed study cut into two parts by seed, each stored as a part run with --only-seeds
    would store it (its own cells_total)."""
    whole = load_study(WHOLE)
    folders = []
    for name, keep in (("part-a", lambda s: s in seeds_a), ("part-b", lambda s: s not in seeds_a)):
        runs = [run for run in whole["runs"] if keep(run["seed"])]
        folder = tmp_path / name
        folder.mkdir()
        write_study_data(folder, {**whole, "cells_total": len(runs), "runs": runs})
        (folder / "plan.yaml").write_bytes((WHOLE / "plan.yaml").read_bytes())
        folders.append(folder)
    return folders[0], folders[1]


def _without_parts_line(lines: list[str]) -> list[str]:
    return [line for line in lines if not line.startswith("Merged from")]


def test_two_parts_merge_into_the_committed_study(tmp_path):
    part_a, part_b = _split(tmp_path, {0, 1})
    out = tmp_path / "merged"
    summary = merge_studies("study", [part_a, part_b], out)
    committed = json.loads((WHOLE / "summary.json").read_text())
    assert {**summary, "headline": _without_parts_line(summary["headline"])} == committed
    parts = [line for line in summary["headline"] if line.startswith("Merged from")]
    assert len(parts) == 1 and "part-a (14 runs" in parts[0] and "part-b (14 runs" in parts[0]
    assert "commit 5e274ed" in parts[0]
    table = (out / "table.md").read_text()
    assert parts[0] in table and table.replace(parts[0] + "\n\n", "") == (WHOLE / "table.md").read_text()
    stored = json.loads((out / RESULTS_FILE).read_text())
    assert [p["folder"] for p in stored["parts"]] == ["part-a", "part-b"] and stored["cells_total"] == 28
    assert (out / "plan.yaml").read_bytes() == (WHOLE / "plan.yaml").read_bytes()


def test_the_merged_statistics_do_not_depend_on_how_the_seeds_were_split(tmp_path):
    """Seeds 0 and 2 against 1 and 3: runs arrive in another order, the verdicts are the same."""
    part_a, part_b = _split(tmp_path, {0, 2})
    summary = merge_studies("study", [part_b, part_a], tmp_path / "merged")
    committed = json.loads((WHOLE / "summary.json").read_text())
    for got, want in zip(summary["primary"], committed["primary"]):
        assert got["comparison"] == want["comparison"] and got["verdict"] == want["verdict"]
        assert got["mean"] == pytest.approx(want["mean"], rel=1e-12)
        assert got["p_holm"] == pytest.approx(want["p_holm"], rel=1e-9)


def test_a_part_cut_short_leaves_the_merge_partial(tmp_path):
    part_a, part_b = _split(tmp_path, {0, 1})
    study = load_study(part_b)
    write_study_data(part_b, {**study, "runs": study["runs"][:-3]})  # three of its 14 cells never ran
    summary = merge_studies("study", [part_a, part_b], tmp_path / "merged")
    assert summary["headline"][0].startswith("Partial: 25 of 28 cells have finished")


def _edit(folder: Path, **changes) -> None:
    study = load_study(folder)
    write_study_data(folder, {**study, **changes})


@pytest.mark.parametrize("change, message", [
    (lambda s: {"plan": {**s["plan"], "seeds": 5}}, "differ in 'plan'"),
    (lambda s: {"quick": True}, "differ in 'quick'"),
    (lambda s: {"host": {**s["host"], "cpu_model": "AMD EPYC 7B13"}}, "differ in 'cpu_model'"),
    (lambda s: {"host": {**s["host"], "torch": "2.12.0+cpu"}}, "differ in 'torch'"),
    (lambda s: {"suite": "a3po"}, "holds a study of suite 'a3po', not 'study'"),
])
def test_parts_of_different_studies_are_refused(tmp_path, change, message):
    part_a, part_b = _split(tmp_path, {0, 1})
    _edit(part_b, **change(load_study(part_b)))
    with pytest.raises(BenchError, match=message):
        merge_studies("study", [part_a, part_b], tmp_path / "merged")
    assert not (tmp_path / "merged").exists()  # nothing half-written


def test_a_cell_in_two_parts_is_refused(tmp_path):
    part_a, part_b = _split(tmp_path, {0, 1})
    study_b = load_study(part_b)
    _edit(part_b, runs=study_b["runs"] + load_study(part_a)["runs"][:1])
    with pytest.raises(BenchError, match=rf"cell sync-s0 is in both {part_a} and {part_b}"):
        merged_results("study", [part_a, part_b])


def test_the_cli_refuses_in_one_line_and_never_overwrites(tmp_path):
    part_a, part_b = _split(tmp_path, {0, 1})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}

    def merge(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "benchmarks", "study", *args], capture_output=True,
                              text=True, cwd=tmp_path, env=env)

    for args, message in ((["--merge", str(part_a), str(part_b)], "--merge: name the merged study's folder with --out"),
                          (["--merge", str(part_a), "--out", "m"], "--merge: give at least two study folders"),
                          (["--merge", str(part_a), str(tmp_path / "nope"), "--out", "m"], "no results.json"),
                          (["--merge", str(part_a), str(part_b), "--out", str(part_a)], "already holds a study")):
        proc = merge(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        assert message in proc.stderr
    assert not (tmp_path / "m").exists()
    before = (part_a / RESULTS_FILE).read_bytes()
    proc = merge("--merge", str(part_a), str(part_b), "--out", "m")
    assert proc.returncode == 0, proc.stderr
    assert "report: m/report.html" in proc.stdout and (tmp_path / "m" / "table.md").exists()
    assert (part_a / RESULTS_FILE).read_bytes() == before
    stored = json.loads((tmp_path / "m" / RESULTS_FILE).read_text())
    assert stored["command"] == f"python -m benchmarks study --merge {part_a} {part_b} --out m"
    assert [p["command"] for p in stored["parts"]] == [load_study(WHOLE)["command"]] * 2


def test_only_seeds_keeps_every_arm_of_the_seeds_named():
    cells = build_cells("a3po", seeds=3, methods=["sync", "async-loglinear"], only_seeds=[0, 2])
    assert [(c.method, c.seed) for c in cells] == [("sync", 0), ("async-loglinear", 0), ("sync", 2),
                                                   ("async-loglinear", 2)]
    with pytest.raises(ValueError, match=r"--only-seeds: no cell has seed 5 \(the seeds: 0, 1, 2\)"):
        build_cells("a3po", seeds=3, only_seeds=[5])


def test_only_seeds_on_the_command_line(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    listed = subprocess.run([sys.executable, "-m", "benchmarks", "a3po", "--seeds", "2", "--methods", "sync",
                             "--only-seeds", "1", "--list"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert listed.returncode == 0 and [line.split()[0] for line in listed.stdout.splitlines()] == ["sync-s1"]
    bad = subprocess.run([sys.executable, "-m", "benchmarks", "a3po", "--only-seeds", "one", "--list"],
                         capture_output=True, text=True, cwd=tmp_path, env=env)
    assert bad.returncode == 2 and bad.stderr.strip() == \
        "benchmarks: --only-seeds: expected comma-separated integers, got 'one'"
