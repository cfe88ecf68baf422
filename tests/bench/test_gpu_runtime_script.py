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
PREPARE = SCRIPT.parent / "gpu_prepare.sh"
SECTIONS = ("1_vllm", "2_pytest", "3_fsdp", "4_a3po", "5_mismatch")


@pytest.mark.slow
def test_gpu_check_runs_every_section_in_order_and_packs_after_each(tmp_path):
    """GPU_CHECK_SMOKE=1: every section at toy shapes on the CPU, the FSDP one too (two gloo ranks;
    GPU_CHECK_GPUS=2 stands in for two GPUs), vLLM's when it is importable."""
    out = tmp_path / "gc"
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "GPU_CHECK_GPUS": "2", "PYTHON": sys.executable,
           "ASYNCRL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run(["bash", str(CHECK), str(out), "500"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("2_pytest", "3_fsdp", "4_a3po", "5_mismatch"):
        assert (out / f"{name}.status").read_text().startswith("exit 0"), (name, proc.stdout[-3000:])
    vllm = (out / "1_vllm.status").read_text()
    assert vllm.startswith("skipped: vllm is not importable") or vllm.startswith("exit 0"), vllm
    assert '"steps": 3' in (out / "3_fsdp.log").read_text()  # rank 0's summary line
    assert "tiny/mismatch" in json.loads((out / "5_mismatch.json").read_text())
    assert "speedup_vs_sync" in (out / "4_a3po.log").read_text()

    with tarfile.open(f"{out}.tgz") as packed:
        assert {f"./{name}.status" for name in SECTIONS} <= set(packed.getnames())
    summary = Path(f"{out}.summary.txt").read_text()
    assert all(f"{name}: " in summary for name in SECTIONS), summary


@pytest.mark.slow
def test_gpu_check_skips_what_the_budget_cannot_hold(tmp_path):
    out = tmp_path / "gc"
    env = {**os.environ, "GPU_CHECK_SMOKE": "1", "PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(CHECK), str(out), "20"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / "5_mismatch.status").read_text().startswith("skipped")
    assert (out / "0_device.txt").exists() and Path(f"{out}.tgz").exists()
    assert Path(f"{out}.summary.txt").exists()


def dry_run(tmp_path, gpus: str, vllm: bool | None) -> tuple[str, Path]:
    """GPU_CHECK_DRY=1 at the default budget: the plan, nothing run. ``vllm``: a stand-in module
    that imports (True) or fails to (False) ahead of whatever is installed."""
    stub = tmp_path / "stub"
    stub.mkdir(exist_ok=True)
    if vllm is not None:
        (stub / "vllm.py").write_text("" if vllm else "raise ImportError('not here')\n")
    out = tmp_path / f"gc-{gpus}-{vllm}"
    env = {**os.environ, "GPU_CHECK_DRY": "1", "GPU_CHECK_GPUS": gpus, "PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(stub), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(["bash", str(CHECK), str(out)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout, out


def test_default_budget_is_420_s_and_holds_every_sections_cap(tmp_path):
    stdout, out = dry_run(tmp_path, "2", True)
    caps = {line.split()[1]: int(line.split()[3].rstrip("s:")) for line in stdout.splitlines()
            if line.startswith("plan ")}
    assert list(caps) == list(SECTIONS)  # vLLM and FSDP planned too: the most a loan can spend
    assert sum(caps.values()) <= 420
    assert "s of 420s" in Path(f"{out}.summary.txt").read_text()  # the default budget
    assert not list(out.glob("*.log"))  # nothing ran


def test_vllm_section_is_skipped_with_a_status_line_without_vllm(tmp_path):
    _, out = dry_run(tmp_path, "2", False)
    assert (out / "1_vllm.status").read_text() == "skipped: vllm is not importable here: nothing run\n"
    assert (out / "3_fsdp.status").read_text().startswith("plan 3_fsdp")
    assert "vllm importable: 0" in (out / "0_device.txt").read_text()


@pytest.mark.parametrize("gpus", ["0", "1"])
def test_fsdp_section_is_skipped_with_a_status_line_below_two_gpus(tmp_path, gpus):
    stdout, out = dry_run(tmp_path, gpus, True)
    assert (out / "3_fsdp.status").read_text() == f"skipped: {gpus} GPU(s) visible, the FSDP section needs 2: nothing run\n"
    assert (out / "1_vllm.status").read_text().startswith("plan 1_vllm")
    assert "torch.distributed.run --nproc_per_node 2" not in stdout


def _prepare(tmp_path, *args, limit: str = "60", wheel_kib: int = 0):
    """benchmarks/gpu_prepare.sh with PYTHON a stand-in whose `-m pip download` writes one wheel of
    ``wheel_kib`` KiB into the -d folder and records its arguments."""
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\n"
                    f"echo \"$@\" > {tmp_path}/pip_args\n"
                    "while (( $# )); do [[ $1 == -d ]] && d=$2; shift; done\n"
                    f"head -c {wheel_kib * 1024} /dev/zero > \"$d/x-1-py3-none-any.whl\"\n")
    fake.chmod(0o755)
    env = {**os.environ, "PYTHON": str(fake), "GPU_PREPARE_DIR": str(tmp_path / "whl"),
           "GPU_PREPARE_LIMIT_MIB": limit}
    return subprocess.run(["bash", str(PREPARE), *args], capture_output=True, text=True, timeout=60, env=env)


def test_prepare_dry_run_lists_the_pinned_wheels_and_the_device_call(tmp_path):
    from importlib.metadata import version

    proc = _prepare(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "whl").exists() and not (tmp_path / "pip_args").exists()  # nothing fetched
    wanted = [line.strip() for line in proc.stdout.splitlines() if line.startswith("  ")]
    assert {w.split("==")[0] for w in wanted} >= {"math-verify", "latex2sympy2_extended", "antlr4-python3-runtime"}
    for pin in wanted:  # the versions this checkout is tested with
        name, pinned = pin.split("==")
        assert version(name) == pinned, pin
    assert "--no-deps --only-binary=:all: --python-version 3.12" in proc.stdout
    call = proc.stdout.splitlines()[-1]
    assert call.startswith("python3 -m pip install -q --no-index --no-deps") and "--target /tmp/site .whl/*.whl" in call
    assert "PYTHONPATH=/tmp/site:$PWD/src" in call and "bash benchmarks/gpu_check.sh" in call
    assert "$OUT/gpu_check.tgz" in call and "$OUT/summary.txt" in call
    assert len(call) <= 2000  # the device's run takes a command of 2,000 characters at most
    assert 'carry [".whl"]' in proc.stdout and "timeout_s 540" in proc.stdout


def test_prepare_downloads_and_refuses_a_folder_over_the_limit(tmp_path):
    ok = _prepare(tmp_path, limit="1", wheel_kib=100)
    assert ok.returncode == 0, ok.stderr
    args = (tmp_path / "pip_args").read_text()
    assert args.startswith("-m pip download") and "--no-deps" in args and "math-verify==" in args
    assert "gpu_check.sh" in ok.stdout.splitlines()[-1]
    big = _prepare(tmp_path, limit="1", wheel_kib=2048)
    assert big.returncode == 1 and "over 1 MiB" in big.stderr
