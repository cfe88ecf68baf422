"""The weight-channel seam: how the trainer's weights reach the rollout workers.

Every channel has ``publish(model, version)`` (trainer side, after each step), ``latest()`` and
``pull(model) -> version`` (worker side, between decode chunks). A channel object is picklable: the
same handle is passed to every worker process or actor. Which one a run uses follows from the
device and the backend (``async.weight_channel=auto``), or is named. A new channel is one file plus
one line in :data:`asyncrl.core.registries.CHANNELS`: a ``ChannelEntry`` with the import path of its
``open_*`` function, called ``(model, ctx=, device=, dtype=)``, what it needs of the backend and the
devices it works on.

* ``shm``: workers on this machine, CPU. Two flat float32 buffers in host shared memory.
* ``cuda``: workers on the trainer's GPU. Two flat buffers in GPU memory shared through CUDA IPC;
  publish and pull are device-to-device copies.
* ``ray``: Ray actors anywhere (:mod:`asyncrl.runtime.ray.store`). The weights, flat in the
  generation dtype, in Ray's object store; the reference in an actor.

``shm`` and ``cuda`` take no lock: the trainer writes the buffer that is not published and then
publishes it, and a worker copies again if the buffer it copied from was rewritten meanwhile
(``channels/flat.py``). A worker killed mid-pull therefore never blocks a publish.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch

from asyncrl.core.import_path import resolve
from asyncrl.core.registries import CHANNELS, auto_channel

__all__ = ["CHANNELS", "WeightChannel", "channel_name", "open_channel"]


@runtime_checkable
class WeightChannel(Protocol):
    def publish(self, model: torch.nn.Module, version: int) -> None: ...

    def latest(self) -> int: ...

    def pull(self, model: torch.nn.Module) -> int: ...


def channel_name(requested: str, backend: str, device: str) -> str:
    """``auto``: the first of the backend's ``auto_channels`` that works with it on ``device``
    (:func:`asyncrl.core.registries.auto_channel`): Ray's object store on the Ray backend, CUDA IPC
    when local workers share the trainer's GPU, host shared memory otherwise. Config has checked
    that there is one."""
    if requested != "auto":
        return requested
    name = auto_channel(backend, device)
    if name is None:
        raise ValueError(f"async.weight_channel: auto finds no channel for async.backend={backend!r} on {device!r}")
    return name


def open_channel(name: str, model: torch.nn.Module, **kwargs) -> WeightChannel:
    """Create channel ``name`` holding ``model``'s weights as version 0."""
    channel = resolve(CHANNELS[name].target)(model, **kwargs)
    channel.publish(model, 0)
    return channel
