"""Trainer ranks on CUDA (``pytest -m gpu``): one FSDP2 rank with NCCL gives the plain model's update;
``torchrun --nproc_per_node 1`` trains async with the CUDA channel; two torchrun ranks with NCCL
train the run of one process (needs two GPUs; skipped below); more ranks than GPUs is refused in
one line."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS / "foundation"))
from test_e2e_train import TINY  # noqa: E402

sys.path.insert(0, str(TESTS / "distributed"))
from test_data_parallel import assert_same_stats, one_rank_and_plain  # noqa: E402

CUDA = [*TINY, "policy.device=cuda", "eval.every=0", "trainer.lr=0.0002", "trainer.steps=5"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}


def _port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def run(tmp_path: Path, world: int, *args: str, torchrun: bool | None = None) -> subprocess.CompletedProcess:
    """``asyncrl train`` on CUDA: one process, or ``world`` torchrun ranks (torchrun=True: even one)."""
    torchrun = world > 1 if torchrun is None else torchrun
    launcher = [] if not torchrun else ["-m", "torch.distributed.run", "--nproc_per_node", str(world),
                                        "--master_addr", "127.0.0.1", "--master_port", _port()]
    return subprocess.run([sys.executable, *launcher, "-m", "asyncrl", "train", *CUDA, *args], capture_output=True,
                          text=True, cwd=tmp_path, env=ENV, timeout=900)


def test_one_fsdp2_rank_on_cuda_gives_the_update_of_the_plain_model(policy_and_batch, tmp_path):
    """FSDP2's root and layer wrappers, the data-parallel seam and the NCCL gathers on one GPU
    change nothing against training the plain model on that GPU (float32; TF32 off on both sides)."""
    (sharded_stats, sharded_weights), (stats, weights) = one_rank_and_plain(*policy_and_batch, tmp_path, "cuda")
    for name, weight in weights.items():
        torch.testing.assert_close(sharded_weights[name], weight, rtol=1e-5, atol=1e-5)
    assert_same_stats(stats, sharded_stats, 1e-4)


def test_torchrun_world_one_trains_async_with_the_cuda_channel(tmp_path):
    out = run(tmp_path, 1, f"policy.cache_dir={tmp_path / 'cache'}", "run.name=one", "run.mode=async",
              "async.n_workers=1", "async.weight_channel=cuda", torchrun=True)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout)["steps"] == 5
    metrics = [json.loads(line) for line in (tmp_path / "runs/one/metrics.jsonl").read_text().splitlines()]
    assert any(r.get("weight_pull_s", 0) > 0 for r in metrics), "no weight pull through the CUDA channel"


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_two_nccl_ranks_train_the_run_of_one(tmp_path):
    cache = f"policy.cache_dir={tmp_path / 'cache'}"
    one = run(tmp_path, 1, cache, "run.name=one")
    assert one.returncode == 0, one.stderr[-3000:]
    two = run(tmp_path, 2, cache, "run.name=two")
    assert two.returncode == 0, two.stderr[-3000:]
    a = load_file(tmp_path / "runs/one/checkpoint/model.safetensors")
    b = load_file(tmp_path / "runs/two/checkpoint/model.safetensors")
    for name in a:  # float32 weights; TF32 matmuls and NCCL's reduction order differ from one process's
        torch.testing.assert_close(b[name], a[name], rtol=1e-3, atol=1e-4)


@pytest.mark.skipif(torch.cuda.device_count() >= 8, reason="needs fewer than 8 GPUs")
def test_more_ranks_than_gpus_is_one_line(tmp_path):
    ranks = torch.cuda.device_count() + 1
    out = run(tmp_path, ranks, f"policy.cache_dir={tmp_path / 'cache'}", "run.name=x")
    assert out.returncode != 0
    ours = [line for line in out.stderr.splitlines() if line.startswith("asyncrl:")]
    assert ours and all("GPU(s); use --nproc_per_node" in line for line in ours), out.stderr[-2000:]
    assert "Traceback (most recent call last):\n  File \"" not in "\n".join(
        line for line in out.stderr.splitlines() if line.startswith("[rank"))
