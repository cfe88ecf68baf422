"""The ``collective`` weight channel between GPUs (``pytest -m gpu``): an NCCL pair of the trainer on
GPU 0 and a worker process on GPU 1 moves the published bf16 weights exactly. NCCL refuses two ranks
on one GPU, so this needs two GPUs and is skipped below."""

import multiprocessing as mp
import os
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")]
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
SPAWN = mp.get_context("spawn")


def _pull(channel, results) -> None:
    from test_channel_dead_worker import Weights

    model = Weights(size=1 << 20).to("cuda", torch.bfloat16)
    version = channel.pull(model)
    results.put((version, [float(p.float().mean()) for p in model.parameters()]))


def test_nccl_pair_moves_the_published_weights():
    from test_channel_dead_worker import Weights

    from asyncrl.runtime.channels import open_channel

    model = Weights(size=1 << 20, value=0.5).to("cuda:0")
    channel = open_channel("collective", model, ctx=SPAWN, device="cuda", dtype=torch.bfloat16)
    model.fill(2.5)
    channel.publish(model, 3)
    results = SPAWN.Queue()
    os.environ["CUDA_VISIBLE_DEVICES_SAVED"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    os.environ["CUDA_VISIBLE_DEVICES"] = "1"  # the worker's "cuda" is the second GPU
    try:
        worker = SPAWN.Process(target=_pull, args=(channel, results))
        worker.start()
    finally:
        os.environ["CUDA_VISIBLE_DEVICES"] = os.environ.pop("CUDA_VISIBLE_DEVICES_SAVED")
    assert results.get(timeout=120) == (3, [2.5] * 8)
    worker.join(timeout=60)
    assert worker.exitcode == 0
