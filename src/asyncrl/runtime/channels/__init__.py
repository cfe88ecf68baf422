"""The weight-channel seam: how the trainer's weights reach the rollout workers.

Every channel has ``publish(model, version)`` (trainer side, after each step), ``latest()`` and
``pull(model) -> version`` (worker side, between decode chunks). A channel object is picklable: the
same handle is passed to every worker process or actor. Which one a run uses follows from the
device and the backend (``async.weight_channel=auto``), or is named. A new channel is one file plus
one line in :data:`CHANNELS`.

* ``shm``: workers on this machine, CPU. One flat float32 tensor in host shared memory.
* ``cuda``: workers on the trainer's GPU. One flat tensor in GPU memory shared through CUDA IPC;
  publish and pull are device-to-device copies.
* ``ray``: Ray actors anywhere. The state dict in Ray's object store, its reference in an actor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class WeightChannel(Protocol):
    def publish(self, model: torch.nn.Module, version: int) -> None: ...

    def latest(self) -> int: ...

    def pull(self, model: torch.nn.Module) -> int: ...


def _shm(model, *, ctx, **_):
    from asyncrl.runtime.channels.flat import HostSharedWeights

    return HostSharedWeights.create(model, ctx)


def _cuda(model, *, ctx, device, dtype, **_):
    from asyncrl.runtime.channels.flat import CudaIpcWeights

    return CudaIpcWeights.create(model, ctx, device=device, dtype=dtype)


def _ray(model, **_):
    from asyncrl.runtime.channels.ray_store import RayWeights

    return RayWeights.create(model)


CHANNELS: dict[str, Callable[..., WeightChannel]] = {"shm": _shm, "cuda": _cuda, "ray": _ray}


def channel_name(requested: str, backend: str, device: str) -> str:
    """``auto``: Ray's object store on the Ray backend, CUDA IPC when the workers share the trainer's
    GPU, host shared memory otherwise."""
    if requested != "auto":
        return requested
    if backend == "ray":
        return "ray"
    return "cuda" if torch.device(device).type == "cuda" else "shm"


def open_channel(name: str, model: torch.nn.Module, **kwargs) -> WeightChannel:
    """Create channel ``name`` holding ``model``'s weights as version 0."""
    channel = CHANNELS[name](model, **kwargs)
    channel.publish(model, 0)
    return channel
