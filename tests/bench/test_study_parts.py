"""The parts of studies still running (benchmarks/parts): each part was run under its registered plan,
unchanged; no cell is in two parts; the parts of a study merge (benchmarks.bench.merge)."""

import hashlib
from pathlib import Path

import pytest

from benchmarks.bench.merge import merged_results
from benchmarks.bench.plan_file import PLAN_COPY
from benchmarks.bench.study import RESULTS_FILE, load_study

ROOT = Path(__file__).resolve().parents[2]
PARTS = ROOT / "benchmarks" / "parts"
PLANS = ROOT / "benchmarks" / "plans"
STUDIES = sorted(p for p in PARTS.iterdir() if p.is_dir()) if PARTS.exists() else []


def _parts(study: Path) -> list[Path]:
    return sorted(p.parent for p in study.glob(f"*/{RESULTS_FILE}"))


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_each_part_ran_its_registered_plan(study):
    registered = PLANS / f"{study.name}.yaml"
    assert registered.exists(), f"{study.name}: no plan registered under benchmarks/plans"
    parts = _parts(study)
    assert parts, f"{study}: no part"
    for part in parts:
        assert (part / PLAN_COPY).read_bytes() == registered.read_bytes(), part
        results = load_study(part)
        assert results["suite"] == "study" and results["plan"]["sha256"] == hashlib.sha256(registered.read_bytes()).hexdigest()
        assert results["host"]["commit"] and results["host"]["dirty"] is False, part
        assert results["runs"] and all(run["metrics"] for run in results["runs"]), part
        assert len(results["runs"]) == results["cells_total"], f"{part}: a part holds only whole cells it planned"


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.name)
def test_the_parts_of_a_study_merge(study):
    parts = _parts(study)
    if len(parts) < 2:
        pytest.skip(f"{study.name}: one part so far")
    merged = merged_results("study", parts)  # refuses a cell in two parts, another plan or processor
    assert len(merged["runs"]) == sum(len(load_study(p)["runs"]) for p in parts)


def test_the_parts_table_lists_every_study():
    table = (PARTS / "README.md").read_text()
    for study in STUDIES:
        assert f"| {study.name} |" in table, study.name
