"""Weight channel through Ray's object store: the trainer ``ray.put``s each new state dict and records
(version, ref) in a tiny ``WeightStore`` actor; rollout actors ask the store for the latest version
between decode chunks and fetch the weights only when it moved. Nothing assumes one machine."""

from __future__ import annotations

from dataclasses import dataclass

import ray
import torch

from asyncrl.policy.lora import export_state_dict


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


@dataclass
class RayWeights:
    """Picklable (an actor handle): the same object serves the trainer and the rollout actors."""

    store: object

    @classmethod
    def create(cls, model: torch.nn.Module) -> "RayWeights":
        return cls(WeightStore.remote())

    def publish(self, model: torch.nn.Module, version: int) -> None:
        state = {k: v.detach().cpu().clone() for k, v in export_state_dict(model).items()}
        ray.get(self.store.set.remote(version, [ray.put(state)]))

    def latest(self) -> int:
        return ray.get(self.store.latest.remote())

    def pull(self, model: torch.nn.Module) -> int:
        version, (ref,) = ray.get(self.store.get.remote())
        state = model.state_dict()
        with torch.no_grad():
            for name, tensor in ray.get(ref).items():
                state[name].copy_(tensor)
        return version


def open_ray(model: torch.nn.Module, **_) -> RayWeights:
    """The ``ray`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return RayWeights.create(model)
