"""The report across learning rates (benchmarks.bench.study_compare): the committed 2.5e-5 K = 16 study
beside a synthetic 5e-5 one built here, a partial one and one not run; plans that differ in more than
the learning rate are refused in one line."""

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench.study import RESULTS_FILE
from benchmarks.bench.study_compare import NOT_RUN, read_rates, write_compare
from cli_forks import checkout_env  # tests/: the checkout on PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]
K16 = ROOT / "benchmarks" / "results" / "2026-11-27-corrections-k16"


def _variant(folder: Path, lr: float, shift: dict[str, float], drop: int = 0) -> Path:
    """The committed study's results at another learning rate: every arm's trainer.lr set to ``lr``, the
    final rewards of the arms in ``shift`` moved by that much, the last ``drop`` runs left out."""
    results = json.loads((K16 / RESULTS_FILE).read_text())
    results = copy.deepcopy(results)
    plan = results["plan"]
    plan["name"] = f"corrections-k16-lr{lr:g}"
    for switches in plan["arms"].values():
        switches["trainer.lr"] = lr
    for run in results["runs"]:
        run["summary"]["final_eval_reward"] += shift.get(run["method"], 0.0)
    results["runs"] = results["runs"][: len(results["runs"]) - drop]
    folder.mkdir(parents=True)
    (folder / RESULTS_FILE).write_text(json.dumps(results))  # no steps table: the endpoint is in results.json
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lr")
    lr5 = _variant(tmp / "lr5e-5", 5e-5, {"a3po_floor": -0.06})  # the floor 6 points lower
    partial = _variant(tmp / "lr1e-4", 1e-4, {}, drop=30)
    summary = write_compare([lr5, K16, tmp / "2026-12-06-corrections-k16-lr1.25e-5", partial], tmp / "out")
    return summary, (tmp / "out" / "compare.md").read_text()


def test_each_rate_gets_its_row_and_the_unrun_ones_say_so(report):
    summary, text = report
    committed = json.loads((K16 / "summary.json").read_text())
    # ordered by learning rate; the folder that does not exist takes its plan from benchmarks/plans
    assert [f["rate"] for f in summary["folders"]] == ["lr 1.25e-5", "lr 2.5e-5", "lr 5e-5", "lr 0.0001"]
    assert [f["status"] for f in summary["folders"]] == [NOT_RUN, "run", "run", NOT_RUN]
    assert [f["note"] for f in summary["folders"]] == ["no folder", "", "", "partial: 110 of 140 runs"]
    rows = {row["rate"]: row for row in summary["comparisons"]["a3po_floor - sync"]}
    primary = {c["comparison"]: c for c in committed["primary"]}["a3po_floor - sync"]
    assert rows["lr 2.5e-5"]["paired"]["mean"] == pytest.approx(primary["mean"], rel=1e-9)
    assert rows["lr 2.5e-5"]["paired"]["verdict"] == primary["verdict"] == "equivalent"
    assert rows["lr 2.5e-5"]["mixed"]["verdict"] == committed["mixed_verdicts"]["a3po_floor - sync"]
    # shifting every floor run by −6 points moves the paired gap, and the mixed model's μ, by exactly that
    assert rows["lr 5e-5"]["paired"]["mean"] == pytest.approx(primary["mean"] - 0.06, abs=1e-12)
    assert rows["lr 5e-5"]["mixed"]["mean"] == pytest.approx(primary["mean"] - 0.06, abs=1e-12)
    assert rows["lr 5e-5"]["paired"]["verdict"] == "differs"
    assert "paired" not in rows["lr 1.25e-5"] and rows["lr 0.0001"]["status"] == NOT_RUN
    assert len(summary["comparisons"]) == 8 and text.count("\n## ") == 8 + 1  # and the arms section
    assert "| lr 1.25e-5 | not run (no folder) |" in text
    assert "| lr 0.0001 | not run (partial: 110 of 140 runs) |" in text


def test_the_headline_answers_the_question_at_each_rate(report):
    summary, text = report
    line = summary["headline"]
    assert line.startswith("Do a3po_floor and vespo end within 3 points of sync at K = 16? lr 1.25e-5: not run. ")
    assert ("lr 2.5e-5: a3po_floor yes (−0.7 points; mixed model: yes); "
            "vespo yes (−0.9 points; mixed model: yes)") in line
    assert "lr 5e-5: a3po_floor no, differs (−6.7 points; mixed model: " in line
    assert line.endswith("lr 0.0001: not run.")
    assert line in text


def test_a_gap_that_differs_from_0_within_the_margin_answers_yes():
    """Holm's "differs" comes first in a verdict, but the question is "within 3 points?": a gap whose
    interval lies inside the margin (TOST p < 0.05) is a yes, and the headline says it also differs."""
    from benchmarks.bench.study_compare import _answer

    assert _answer("differs", 0.002) == "yes, though it differs from 0 (TOST p 0.002)"
    assert _answer("differs", 0.3) == "no, differs" and _answer("differs") == "no, differs"
    assert _answer("equivalent", 0.01) == "yes" and _answer("undecided", 0.2) == "undecided"


def test_plans_differing_in_more_than_the_rate_are_refused(tmp_path):
    other = _variant(tmp_path / "lag8", 5e-5, {})
    results = json.loads((other / RESULTS_FILE).read_text())
    results["plan"]["arms"]["vespo"]["async.lag"] = 8
    (other / RESULTS_FILE).write_text(json.dumps(results))
    with pytest.raises(ValueError, match=r"in more than the learning rate \(arms\.vespo\.async\.lag\)$"):
        read_rates([other, K16])
    with pytest.raises(ValueError, match="no plan in any folder"):
        read_rates([tmp_path / "nothing"])


def test_the_command(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "study", "--compare", str(K16), str(tmp_path / "none"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, env=checkout_env())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].endswith("none: not run.")
    assert (tmp_path / "out" / "compare.md").exists() and (tmp_path / "out" / "compare.json").exists()
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "a3po", "--compare", str(K16)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=checkout_env())
    assert proc.returncode == 2
    assert proc.stderr == "benchmarks: --compare: compares planned studies (the study suite), not a3po\n"


def test_each_arm_is_shown_at_the_seed_and_the_warm_start_level_at_each_rate(report):
    summary, text = report
    committed = json.loads((K16 / "summary.json").read_text())["warm_start_level"]
    for arm in ("sync", "a3po_floor", "vespo"):
        assert summary["arms"]["lr 2.5e-5"][arm] == pytest.approx(committed[arm]["final_eval_reward"], rel=1e-9)
    # the floor's runs moved by −6 points at 5e-5: its mean moves by that, its spread does not
    floor5, floor25 = summary["arms"]["lr 5e-5"]["a3po_floor"], summary["arms"]["lr 2.5e-5"]["a3po_floor"]
    assert floor5["mean"] == pytest.approx(floor25["mean"] - 0.06, abs=1e-12)
    assert floor5["ci_high"] - floor5["ci_low"] == pytest.approx(floor25["ci_high"] - floor25["ci_low"], rel=1e-9)
    assert set(summary["arms"]) == {"lr 2.5e-5", "lr 5e-5"}  # the rates that ran
    section = text.split("## Each arm's final_eval_reward", 1)[1]
    row = next(line for line in section.splitlines() if line.startswith("| a3po_floor |"))
    stat = committed["a3po_floor"]["final_eval_reward"]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[0] == "a3po_floor" and cells[1] == NOT_RUN and cells[-1] == NOT_RUN
    assert cells[2] == (f"{stat['mean']:.3f} ± {(stat['seed_ci_high'] - stat['seed_ci_low']) / 2:.3f} "
                        f"(± {(stat['ci_high'] - stat['ci_low']) / 2:.3f} by warm start, ICC {stat['icc']:.2f})")
