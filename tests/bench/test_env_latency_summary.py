"""benchmarks/env_latency_summary.py on hand-built run folders: pairs by repeat, the ratio's
geometric mean and paired interval, the 5-pair mark, the ideal, the load kept beside each run and a
byte-stable pack."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("env_latency_summary", ROOT / "benchmarks" / "env_latency_summary.py")
summary_script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(summary_script)


def _run(out: Path, name: str, step_s: float, train_s: float = 0.5, duration_s: float = 1.0) -> None:
    d = out / name
    d.mkdir(parents=True)
    rows = [{"step": k, "step_time_s": step_s, "train_time_s": train_s, "trainer_wait_s": 0.0,
             "episode/duration_mean_s": duration_s, "episode/duration_max_s": 3.0,
             "episode/env_wait_s": 1.0, "episode/decode_s": 0.2, "episode/in_flight_max": 32, "batch_samples": 32}
            for k in range(1, 6)]
    (d / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (d / "summary.json").write_text("{}")
    (out / f"{name}.load").write_text("0.50 0.40 0.30\n1.50 0.60 0.35\n")


def test_pairs_ratios_interval_ideal_and_mark(tmp_path, capsys):
    # sync steps take 4 s; async 2 s in every pair but the third (1 s): ratios 2, 2, 4
    for r, async_s in zip((1, 2, 3), (2.0, 2.0, 1.0)):
        _run(tmp_path, f"calculator-m0.5-sync-r{r}", 4.0)
        _run(tmp_path, f"calculator-m0.5-async2-r{r}", async_s)
    summary = summary_script.main(tmp_path)
    arm = summary["calculator-m0.5"]["arms"]["async2"]
    assert arm["ratios"] == [2.0, 2.0, 4.0]
    # geometric mean 2^(4/3) = 2.52; ideal = 4 / max(0.5, 1.0) = 4; share of the gain (2 - 1) / (4 - 1)
    assert math.isclose(arm["paired"]["geomean"], 2 ** (4 / 3))
    assert arm["paired"]["ci_low"] < 2.0 < 4.0 < arm["paired"]["ci_high"]
    assert arm["ideal"] == [4.0] * 3 and math.isclose(arm["share_of_ideal_gain"][0], 1 / 3)
    assert summary["calculator-m0.5"]["repeats"][1]["sync"]["load"] == [[0.5, 0.4, 0.3], [1.5, 0.6, 0.35]]
    assert "below the 5-repeat protocol" in capsys.readouterr().out


def test_pack_is_byte_stable_and_holds_every_run(tmp_path):
    for name in ("guess-m0-sync-r1", "guess-m0-async2-r1"):
        _run(tmp_path, name, 1.0)
    summary_script.pack(tmp_path, ["guess-m0-async2-r1", "guess-m0-sync-r1"])
    first = (tmp_path / "runs.json.gz").read_bytes()
    summary_script.pack(tmp_path, ["guess-m0-async2-r1", "guess-m0-sync-r1"])
    assert (tmp_path / "runs.json.gz").read_bytes() == first
    runs = json.loads(gzip.decompress(first))
    assert set(runs) == {"guess-m0-sync-r1", "guess-m0-async2-r1"} and len(runs["guess-m0-sync-r1"]["metrics"]) == 5
