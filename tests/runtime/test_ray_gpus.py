"""Ray actors that ask for GPUs of their own get GPUs other than the trainer's: a private cluster is
started seeing every visible GPU but the trainer's; the ``collective`` channel (an NCCL pair, which
refuses two ranks on one device) is refused in one line for actors on a fraction of a GPU."""

import os

import pytest
import torch

from asyncrl.config import Config
from asyncrl.runtime.validate import check_parts
from asyncrl.runtime.ray import _trainer_gpus_kept_out, cluster


@pytest.mark.parametrize("trainer, visible, count, expected", [
    ([0], None, 4, ["1", "2", "3"]),
    ([1], "4,5,6", 8, ["4", "6"]),  # an index among the visible ones, as torch numbers them
    ([0], None, 1, []),  # nothing left: check_gpus then says the actors' GPUs are missing, in one line
    ([0, 1, 2], None, 8, ["3", "4", "5", "6", "7"]),  # three trainer ranks on the node
    (None, "0,1", 2, None),  # fractional actors share the trainer's GPU on purpose
])
def test_the_gpus_beside_the_trainer(trainer, visible, count, expected):
    assert cluster.gpus_beside(trainer, visible, count) == expected


def test_a_private_cluster_is_started_without_the_trainers_gpu(monkeypatch, tmp_path):
    seen = {}

    def init(**kwargs):
        seen.update(kwargs, visible=os.environ.get("CUDA_VISIBLE_DEVICES"))

    monkeypatch.setattr(cluster.ray, "init", init)
    monkeypatch.setattr(cluster, "new_temp_dir", lambda: str(tmp_path))
    monkeypatch.setattr(cluster, "start_ray_reaper", lambda *args: None)
    monkeypatch.setattr(cluster.RayletWatch, "of_child_raylet", staticmethod(lambda reaper: None))
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    try:
        cluster._start_private(2, trainer_gpus=[0])
    finally:
        monkeypatch.setattr(cluster, "_reaper", None)
        monkeypatch.setattr(cluster, "_temp_dir", None)
        monkeypatch.setattr(cluster, "_raylet_watch", None)
        import atexit
        atexit.unregister(cluster.stop_private)
    assert seen["visible"] == "1,2,3" and seen["num_gpus"] == 3
    assert "CUDA_VISIBLE_DEVICES" not in os.environ  # this process keeps what it had


def _cfg(device="cuda:2", share=1.0, channel="auto") -> Config:
    cfg = Config()
    cfg.policy.device, cfg.run.mode = device, "async"
    cfg.async_.backend, cfg.async_.n_workers, cfg.async_.gpus_per_worker = "ray", 2, share
    cfg.async_.weight_channel = channel
    return cfg


def test_only_actors_on_whole_gpus_keep_the_trainers_out():
    assert _trainer_gpus_kept_out(_cfg(), {}) == [2]
    assert _trainer_gpus_kept_out(_cfg(device="cuda"), {}) == [0]
    assert _trainer_gpus_kept_out(_cfg(share=0.5), {}) is None
    assert _trainer_gpus_kept_out(_cfg(device="cpu"), {}) is None


def test_under_torchrun_every_local_ranks_gpu_is_kept_out():
    """Rank 0 starts the private cluster, but ranks 1..3 train on GPUs 1..3: an actor given one of
    those would share a trainer rank's GPU (and an NCCL pair there would have two ranks on it)."""
    assert _trainer_gpus_kept_out(_cfg(device="cuda:0"), {"LOCAL_WORLD_SIZE": "4"}) == [0, 1, 2, 3]
    assert _trainer_gpus_kept_out(_cfg(device="cuda:0"), {"LOCAL_WORLD_SIZE": "1"}) == [0]


@pytest.mark.parametrize("share", [0.0, 0.5])
def test_the_collective_channel_needs_actors_on_whole_gpus(share):
    with pytest.raises(ValueError) as err:
        check_parts(_cfg(share=share, channel="collective"))
    message = str(err.value)
    assert message.startswith("async.weight_channel: 'collective' needs each rollout actor on a GPU of its own")
    assert "async.gpus_per_worker=1" in message and "\n" not in message
    check_parts(_cfg(share=1.0, channel="collective"))  # whole GPUs: accepted
