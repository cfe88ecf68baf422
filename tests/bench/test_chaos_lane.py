"""benchmarks/chaos_lane.py (faults at random moments in local, Ray and torchrun runs; docs/errors.md,
"The chaos lane"): its draws give each configuration only the faults and moments that apply, and a
short local campaign writes one log line per fault and a summary whose checks all hold."""

import json
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
import chaos_lane  # noqa: E402


def _draws(config: str, *, fresh: bool, faults: int, survived: int = 0, n: int = 400) -> set[tuple[str, str]]:
    cfg = SimpleNamespace(name=config, args=SimpleNamespace(kinds=list(chaos_lane.FAULTS)))
    launch = SimpleNamespace(fresh=fresh, faults=faults, survived=survived)
    rng = random.Random(0)
    return {chaos_lane.draw(rng, cfg, launch) for _ in range(n)}


def test_each_configuration_draws_only_its_faults_and_moments():
    for config in chaos_lane.CONFIGS:
        resumed = _draws(config, fresh=False, faults=0)
        kinds = {kind for kind, _ in resumed}
        assert kinds == {k for k, f in chaos_lane.FAULTS.items() if config in f.configs}, config
        assert ("sigkill-trainer", "startup") in resumed  # a resumed launch no fault has touched yet
        assert (("sigkill-trainer", "spawn") in resumed) == (config != "ray"), config  # no worker process in Ray
        # the first launch waits for its first checkpoint; a touched launch is past its start
        for launch in (dict(fresh=True, faults=0), dict(fresh=False, faults=1)):
            assert {m for _, m in _draws(config, **launch)} <= {"step", "write"}, (config, launch)
    assert {k for k, _ in _draws("local", fresh=False, faults=1, survived=chaos_lane.MAX_SURVIVED)} == {
        "sigkill-trainer", "sigterm-trainer", "disk-full", "corrupt-shard"}  # past its survivals: one that ends it
    assert "sigkill-raylet" in {k for k, _ in _draws("ray", fresh=False, faults=0)}
    assert "sigstop-rank1" in {k for k, _ in _draws("torchrun", fresh=False, faults=0)}


@pytest.mark.parametrize("argv, message", [
    (["--configs", "local,k8s"], "--configs: one or more of local, ray, torchrun, got local,k8s"),
    (["--configs", "local", "--kinds", "sigkill-raylet"], "--kinds: none applies to the local configuration"),
    (["--faults", "0"], "--faults: must be >= 1"),
])
def test_bad_arguments_are_one_line(argv, message, capsys):
    with pytest.raises(SystemExit) as stop:
        chaos_lane.parse_args(argv)
    assert stop.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.slow
def test_three_local_faults_log_and_summary(tmp_path, cache):
    out = tmp_path / "chaos"
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "chaos_lane.py"), "--faults", "3", "--configs", "local",
                           "--seed", "1", "--out", str(out), "--cache", cache],
                          capture_output=True, text=True, timeout=900)
    summary = json.loads((out / "summary.json").read_text())
    assert proc.returncode == 0 and summary["passed"], json.dumps(summary["failures"]) + proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "faults.jsonl").read_text().splitlines()]
    assert sorted(r["fault"] for r in records) == [1, 2, 3] and summary["faults"] == 3
    for record in records:
        assert record["config"] == "local" and record["kind"] in chaos_lane.FAULTS
        assert record["ok"] and record["resumed_ok"] and record["checks"] and all(record["checks"].values())
        assert {"moment", "exit", "stderr_last", "launch", "at_s"} <= record.keys()
    local = summary["by_config"]["local"]
    assert sum(kind["injected"] for kind in local["by_kind"].values()) == 3
    final = local["final"]
    assert final["final_exit"] == 0 and final["launches"] >= 2 and all(final["checks"].values())
    assert final["steps"] > 2 and final["groups_trained"] > 0
