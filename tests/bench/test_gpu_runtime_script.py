"""benchmarks/gpu_runtime.py (the GPU micro-benchmark through our own channel, engine and trainer)
runs end to end at a tiny size on the CPU, so a GPU session can trust it to run there."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runtime.py"


def test_gpu_runtime_script_tiny_on_cpu(tmp_path):
    out = tmp_path / "gpu_runtime.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--size", "tiny", "--device", "cpu", "--batch", "16",
                           "--new-tokens", "4", "--gen-dtype", "float32", "--reps", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(out.read_text())["tiny"]
    assert row["channel"] == "shm" and row["device"] == "cpu"
    assert row["publish_s"] > 0 and row["pull_s"] > 0 and row["decode_tok_per_s"] > 0
    assert row["recompute_over_loglinear"] > 1
