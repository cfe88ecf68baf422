"""``trainer.fsdp.param_dtype=auto``: FSDP gathers bfloat16 on CUDA under bf16 autocast (fp32
reduce), float32 elsewhere, so CPU runs keep their numbers. The sharding itself is faked: the test
records the options ``shard_model`` hands to ``fully_shard``."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from asyncrl.config import load_config
from asyncrl.distributed.config import FsdpConfig, gather_dtype, param_dtype_of
from asyncrl.distributed.world import World
from asyncrl.training import fsdp


@pytest.mark.parametrize("param_dtype,device,autocast,expected", [
    ("auto", "cuda", "bfloat16", "bfloat16"), ("auto", "cuda:1", "bfloat16", "bfloat16"),
    ("auto", "cpu", "bfloat16", "none"), ("auto", "cuda", "none", "none"), ("auto", "cuda", "float16", "none"),
    ("none", "cuda", "bfloat16", "none"), ("bfloat16", "cpu", "none", "bfloat16"),
])
def test_gather_dtype_rule(param_dtype, device, autocast, expected):
    assert gather_dtype(param_dtype, device, autocast) == expected


def test_auto_is_the_default_and_follows_the_config():
    assert FsdpConfig().param_dtype == "auto"
    cfg = load_config(overrides=["trainer.autocast=bfloat16"])
    assert param_dtype_of(cfg) == "none"  # the default device is the CPU
    assert param_dtype_of(load_config(overrides=["trainer.autocast=bfloat16", "policy.device=cuda"])) == "bfloat16"
    assert param_dtype_of(load_config(overrides=["policy.device=cuda"])) == "none"  # float32 compute


class _OnDevice(torch.nn.Module):
    """A module whose parameters report ``device`` (all ``shard_model`` asks of them): no GPU needed."""

    def __init__(self, device: str):
        super().__init__()
        self.where = torch.device(device)

    def parameters(self, recurse: bool = True):
        yield SimpleNamespace(device=self.where)


@pytest.mark.parametrize("device,autocast,expected", [
    ("cuda", "bfloat16", torch.bfloat16), ("cpu", "bfloat16", None), ("cuda", "none", None),
])
def test_shard_model_gathers_in_the_resolved_dtype(monkeypatch, device, autocast, expected):
    import torch.distributed.device_mesh as device_mesh
    import torch.distributed.fsdp as torch_fsdp

    calls = []
    monkeypatch.setattr(device_mesh, "init_device_mesh", lambda kind, shape: ("mesh", kind))
    monkeypatch.setattr(torch_fsdp, "fully_shard", lambda module, **options: calls.append(options))
    fsdp.shard_model(_OnDevice(device), World(rank=0, size=2, local_rank=0), FsdpConfig(), autocast=autocast)
    assert calls, "fully_shard was not called"
    policies = [options.get("mp_policy") for options in calls]
    if expected is None:
        assert policies == [None] * len(calls)
    else:
        assert all(p.param_dtype == expected and p.reduce_dtype == torch.float32 for p in policies)
