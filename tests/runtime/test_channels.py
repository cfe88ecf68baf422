"""Weight channels: the registry's choice, and host shared memory across a process boundary."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from channel_check import round_trip  # noqa: E402

from asyncrl.runtime.channels import CHANNELS, WeightChannel, channel_name  # noqa: E402


@pytest.mark.parametrize("requested,backend,device,expected", [
    ("auto", "local", "cpu", "shm"), ("auto", "local", "cuda", "cuda"), ("auto", "local", "cuda:1", "cuda"),
    ("auto", "ray", "cuda", "ray"), ("auto", "ray", "cpu", "ray"), ("shm", "local", "cuda", "shm"),
])
def test_channel_choice(requested, backend, device, expected):
    assert channel_name(requested, backend, device) == expected
    assert expected in CHANNELS


def test_shm_round_trip_across_processes(tiny_policy):
    model = tiny_policy[0]
    import copy

    seen, expected = round_trip(copy.deepcopy(model), "shm", "cpu", torch.float32)
    assert [v for v, _ in seen] == [0, 3]
    for (_, sums), want in zip(seen, expected):
        assert sums.keys() == want.keys()
        for key in want:
            assert sums[key] == pytest.approx(want[key], rel=1e-6, abs=1e-6), key


def test_shm_channel_is_a_weight_channel(tiny_policy):
    import multiprocessing as mp

    from asyncrl.runtime.channels import open_channel

    channel = open_channel("shm", tiny_policy[0], ctx=mp.get_context("spawn"))
    assert isinstance(channel, WeightChannel) and channel.latest() == 0


def test_cuda_channel_refused_on_cpu_config():
    from asyncrl.config import ConfigError
    from asyncrl.runtime.validate import load_run_config  # the channels' entries are asked

    with pytest.raises(ConfigError, match="async.weight_channel"):
        load_run_config(overrides=["async.weight_channel=cuda"])
    with pytest.raises(ConfigError, match="async.weight_channel"):
        load_run_config(overrides=["async.weight_channel=ray"])
