"""benchmarks/drift_per_version.py: the per-token drift (logged ``tv``) by staleness, read from a
committed atlas (one row per K) or a committed plan study (one row per simulated-mode arm)."""

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
RESULTS = BENCHMARKS / "results"
sys.path.insert(0, str(BENCHMARKS))
import drift_per_version as drift  # noqa: E402


def test_the_atlas_gives_one_row_per_k_and_drift_grows_with_k():
    table = drift.drift_by_k(RESULTS / "2026-11-25-atlas-full")
    assert list(table) == [0, 1, 2, 4, 8, 16]
    ppo = [table[k]["ppo"] for k in table]
    assert ppo == sorted(ppo) and ppo[0] < 0.005 < ppo[-1]


def test_a_plan_study_gives_one_row_per_arm_with_its_k_from_the_plan():
    rows = drift.drift_by_arm(RESULTS / "2026-11-27-lr-grid-k0")
    assert len(rows) == 12 and {r["K"] for r in rows} == {0}  # async.lag comes from the plan's common
    by_arm = {r["arm"]: r for r in rows}
    assert all(len(r["seed_means"]) == 2 for r in rows)
    # at K = 0 the drift is the forward lag of a step's own minibatch updates: it grows with the lr
    for family in ("ppo", "vespo", "dppo", "sapo"):
        tvs = [by_arm[f"{family}_lr{lr}"]["tv"] for lr in (25, 50, 100)]
        assert tvs == sorted(tvs), family
    assert by_arm["ppo_lr25"]["loss"] == "ppo / prox none"


def test_skip_leaves_out_the_first_steps():
    full = {r["arm"]: r["tv"] for r in drift.drift_by_arm(RESULTS / "2026-11-27-lr-grid-k0")}
    late = {r["arm"]: r["tv"] for r in drift.drift_by_arm(RESULTS / "2026-11-27-lr-grid-k0", skip=30)}
    assert full.keys() == late.keys() and any(full[a] != late[a] for a in full)


def test_a_folder_without_drift_is_one_line_and_exit_2(tmp_path):
    study = RESULTS / "2026-11-25-control"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "drift_per_version.py"), str(study)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.strip().splitlines()) == 1
