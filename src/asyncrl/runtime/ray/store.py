"""Weight channel through Ray's object store: the trainer ``ray.put``s each new version and records
(version, ref) in a tiny ``WeightStore`` actor; rollout actors ask the store for the latest version
between decode chunks and fetch the weights only when it moved. Nothing assumes one machine.

A version is one flat buffer in the generation dtype (``dtype``: bf16 on GPUs, half the bytes of
float32), laid out as the other channels lay theirs out (:func:`asyncrl.runtime.channels.flat.weight_layout`:
a tied weight once). On a GPU the trainer copies into a host buffer of its own that is pinned (page-
locked), so the device-to-host copy runs at the link's full speed, and reuses it for every version
(``ray.put`` copies it into the store). The buffer goes into the store as a byte array, which Ray
stores out of band and a reader on the same node maps without a copy."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import ray
import torch

from asyncrl.policy.lora import export_state_dict
from asyncrl.runtime.channels.flat import fill_tied, flat_views, tied_names, weight_layout


@ray.remote(num_cpus=0)
class WeightStore:
    def __init__(self):
        self.version = -1
        self.ref = None

    def set(self, version: int, refs: list) -> None:
        self.version, self.ref = version, refs[0]  # a list keeps Ray from resolving the ref

    def latest(self) -> int:
        return self.version

    def get(self) -> tuple[int, list]:
        return self.version, [self.ref]


def host_buffer(numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The trainer's flat host buffer: pinned when the weights are on a GPU (pinning needs CUDA)."""
    return torch.empty(numel, dtype=dtype, pin_memory=device.type == "cuda" and torch.cuda.is_available())


@dataclass
class RayWeights:
    """Picklable (an actor handle): the same object serves the trainer and the rollout actors."""

    store: object
    layout: list[tuple[str, torch.Size]]
    tied: dict[str, str]
    dtype: torch.dtype = torch.float32
    _host: torch.Tensor | None = field(default=None, repr=False)  # the trainer's; never pickled

    @classmethod
    def create(cls, model: torch.nn.Module, dtype: torch.dtype = torch.float32) -> "RayWeights":
        return cls(WeightStore.remote(), weight_layout(model), tied_names(export_state_dict(model)), dtype)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_host": None}

    @torch.no_grad()
    def host_copy(self, model: torch.nn.Module) -> torch.Tensor:
        """``model``'s published tensors in ``dtype``, in the flat host buffer (cast on their device)."""
        state = export_state_dict(model)
        sources = [state[name].detach() for name, _ in self.layout]
        if self._host is None:
            self._host = host_buffer(sum(s.numel() for _, s in self.layout), self.dtype, sources[0].device)
        for (_, view), source in zip(flat_views(self._host, self.layout), sources):
            view.copy_(source, non_blocking=self._host.is_pinned())  # cast on the source's device
        if self._host.is_pinned():
            torch.cuda.synchronize(sources[0].device)  # the copies above were asynchronous
        return self._host

    def publish(self, model: torch.nn.Module, version: int) -> None:
        flat = self.host_copy(model)
        ref = ray.put(flat.view(torch.uint8).numpy())  # bytes: numpy has no bfloat16
        ray.get(self.store.set.remote(version, [ref]))

    def latest(self) -> int:
        return ray.get(self.store.latest.remote())

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        version, (ref,) = ray.get(self.store.get.remote())
        with warnings.catch_warnings():  # the store's arrays are read-only; they are only read here
            warnings.simplefilter("ignore", UserWarning)
            flat = torch.from_numpy(ray.get(ref)).view(self.dtype)
        state = model.state_dict()
        for name, view in flat_views(flat, self.layout):
            state[name].copy_(view)  # host to the model's device, one tensor at a time
        fill_tied(state, self.tied)
        return version


def open_ray(model: torch.nn.Module, *, dtype: torch.dtype = torch.float32, **_) -> RayWeights:
    """The ``ray`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return RayWeights.create(model, dtype)
