"""A study's per-step table: written xz-compressed, byte-identical on a rewrite, read back to the
logged values; a folder written before the switch (steps.csv.gz) reads the same."""

import gzip
import lzma
import os
import subprocess
import sys

import pytest

from benchmarks.bench.study import GZIP_STEPS_FILE, STEPS_FILE, StudyError, load_study, steps_table, write_study_data

RUNS = [{"cell": "a-s0", "method": "a", "seed": 0, "summary": {"x": 1},
         "metrics": [{"step": 0, "eval_reward": 0.25}, {"step": 1, "reward_mean": 0.1, "hist": [3, 4]}]},
        {"cell": "b-s0", "method": "b", "seed": 0, "summary": {"x": 2}, "metrics": [{"step": 0, "loss": None}]}]


def test_the_table_round_trips_and_rewrites_byte_identical(tmp_path):
    write_study_data(tmp_path, {"suite": "s", "runs": RUNS})
    first = (tmp_path / STEPS_FILE).read_bytes()
    assert first.startswith(b"\xfd7zXZ")  # xz
    study = load_study(tmp_path)
    assert [r["metrics"] for r in study["runs"]] == [r["metrics"] for r in RUNS]
    write_study_data(tmp_path, {"suite": "s", "runs": RUNS})
    assert (tmp_path / STEPS_FILE).read_bytes() == first


def test_steps_digits_rounds_the_diagnostics_and_keeps_eval_and_step_exact(tmp_path):
    runs = [{"cell": "a-s0", "method": "a", "seed": 0, "summary": {},
             "metrics": [{"step": 3, "eval_reward": 0.123456789, "loss": 0.123456789, "grad_norm": 12345.678,
                          "tokens": 123456789, "kl": float("nan"), "hist": [0.123456789]}]}]
    write_study_data(tmp_path, {"suite": "s", "steps_digits": 4, "runs": runs})
    (rec,) = load_study(tmp_path)["runs"][0]["metrics"]
    assert rec["eval_reward"] == 0.123456789 and rec["step"] == 3 and rec["tokens"] == 123456789  # exact
    assert rec["loss"] == 0.1235 and rec["grad_norm"] == 12350.0 and rec["hist"] == [0.123456789]
    assert rec["kl"] != rec["kl"]  # NaN stays NaN
    assert load_study(tmp_path)["steps_digits"] == 4  # results.json says the table was rounded


def test_steps_digits_compacts_a_stored_study_and_keeps_its_header(tmp_path):
    from benchmarks.bench.runner import collect_results

    runs = [{**RUNS[0], "metrics": [{"step": 0, "eval_reward": 0.123456789, "loss": 0.123456789}]}]
    write_study_data(tmp_path, {"suite": "s", "command": "the run's", "host": {"commit": "abc"}, "runs": runs})
    stored = collect_results("s", [], tmp_path, quick=False, command="a re-render", runs_dir=tmp_path / "none",
                             header={"steps_digits": 4})
    again = load_study(tmp_path)
    assert again["command"] == "the run's" and again["host"] == {"commit": "abc"} and again["steps_digits"] == 4
    assert again["runs"][0]["metrics"] == [{"step": 0, "eval_reward": 0.123456789, "loss": 0.1235}]
    assert stored["steps_digits"] == 4


def test_steps_digits_below_one_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "benchmarks", "a3po", "--steps-digits", "0", "--list"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 2 and proc.stderr.strip() == "benchmarks: --steps-digits: must be >= 1, got 0"


def test_an_older_gzip_table_reads_alike_and_a_rewrite_replaces_it(tmp_path):
    write_study_data(tmp_path, {"suite": "s", "runs": RUNS})
    text = lzma.decompress((tmp_path / STEPS_FILE).read_bytes())
    (tmp_path / STEPS_FILE).unlink()
    (tmp_path / GZIP_STEPS_FILE).write_bytes(gzip.compress(text))
    assert [r["metrics"] for r in load_study(tmp_path)["runs"]] == [r["metrics"] for r in RUNS]
    write_study_data(tmp_path, {"suite": "s", "runs": RUNS})
    assert not (tmp_path / GZIP_STEPS_FILE).exists() and (tmp_path / STEPS_FILE).exists()


def test_a_corrupt_table_is_one_line_naming_it(tmp_path):
    write_study_data(tmp_path, {"suite": "s", "runs": RUNS})
    (tmp_path / STEPS_FILE).write_bytes(steps_table(RUNS)[:40])
    with pytest.raises(StudyError, match=rf"{STEPS_FILE}: unreadable steps table"):
        load_study(tmp_path)
