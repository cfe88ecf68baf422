"""benchmarks/gpu_runtime.py (the GPU benchmark through our own channel, engine and trainer) runs
every section end to end at a tiny size on the CPU, so a GPU session can trust it to run there."""

import json
import os
import tarfile
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_runtime.py"


# slow: it guards a benchmark script that only a GPU session runs (benchmarks/gpu_check.sh), through
# parts the default suite covers one by one; run `make test-all` before a GPU session
@pytest.mark.slow
def test_gpu_runtime_script_tiny_on_cpu(tmp_path):
    out = tmp_path / "gpu_runtime.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--size", "tiny", "--device", "cpu", "--rows", "16",
                           "--prompt", "8", "--completion", "6", "--minibatches", "2", "--micro-batch", "4",
                           "--gen-dtype", "float32", "--reps", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["device"] == "cpu"
    for section in ("weights", "decode", "trainer", "mismatch"):
        assert "error" not in result[f"tiny/{section}"], result[f"tiny/{section}"]
    weights, decode = result["tiny/weights"], result["tiny/decode"]
    assert weights["channel"] == "shm" and weights["publish_ms"] > 0 and weights["pull_ms"] > 0
    assert decode["transformers_decode_tok_per_s"] > 0
    trainer = result["tiny/trainer"]
    # the extra forward pass costs more than the log-space interpolation, as the trainer spends them
    assert trainer["recompute_prox_time_s"] > trainer["loglinear_prox_time_s"] > 0
    # fp32 generator and fp32 trainer agree on the generator's own tokens
    assert result["tiny/mismatch"]["logp_mismatch_mean_head_autocast"] < 1e-4


CHECK = SCRIPT.parent / "gpu_check.sh"


@pytest.mark.slow
def test_gpu_check_runs_every_section_in_order_and_packs_after_each(tmp_path):
    out = tmp_path / "gc"
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHON": sys.executable,
           "ASYNCRL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", str(CHECK), str(out), "400"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("1_trainer", "2_channel", "3_nockpt", "4_mismatch", "5_a3po", "7_pytest"):
        assert (out / f"{name}.status").read_text().startswith("exit 0"), name
    assert "not importable" in (out / "6_vllm.status").read_text() or (out / "6_vllm.status").read_text().startswith("exit 0")
    assert "tiny/trainer" in json.loads((out / "3_nockpt.json").read_text())

    with tarfile.open(f"{out}.tgz") as packed:
        assert "./7_pytest.status" in packed.getnames()


@pytest.mark.slow
def test_gpu_check_skips_what_the_budget_cannot_hold(tmp_path):
    out = tmp_path / "gc"
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(CHECK), str(out), "20"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "7_pytest.status").read_text().startswith("skipped")
    assert (out / "0_device.txt").exists() and Path(f"{out}.tgz").exists()
