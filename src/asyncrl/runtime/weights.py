"""Weight sync on one machine: one flat shared-memory tensor holding every parameter, a version
counter and a lock. The trainer publishes after each step; rollout workers pull between decode
chunks. Pulling copies under the lock, so a worker never sees half of one version and half of the
next, and the version it reads is the version of exactly the weights it copied.

A LoRA (peft) trainer publishes its *merged* weights under the base model's names
(:func:`asyncrl.policy.lora.export_state_dict`): workers hold the plain base model, and the
layout is the base model's, the same fixed size with or without LoRA."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

import torch

from asyncrl.policy.lora import export_state_dict


def _param_shapes(model: torch.nn.Module) -> list[tuple[str, torch.Size]]:
    return [(name, p.shape) for name, p in export_state_dict(model).items()]


@dataclass
class SharedWeights:
    """Picklable handle (crosses ``spawn`` boundaries): pass it to worker processes."""

    flat: torch.Tensor  # [n_params] float32, in shared memory
    version: "mp.sharedctypes.Synchronized"
    lock: "mp.synchronize.Lock"
    layout: list[tuple[str, torch.Size]]

    @classmethod
    def create(cls, model: torch.nn.Module, ctx: mp.context.BaseContext, version: int = 0) -> "SharedWeights":
        layout = _param_shapes(model)
        total = sum(s.numel() for _, s in layout)
        flat = torch.zeros(total, dtype=torch.float32).share_memory_()
        handle = cls(flat, ctx.Value("q", -1, lock=False), ctx.Lock(), layout)
        handle.publish(model, version)
        return handle

    def _views(self) -> dict[str, torch.Tensor]:
        views, offset = {}, 0
        for name, shape in self.layout:
            n = shape.numel()
            views[name] = self.flat[offset:offset + n].view(shape)
            offset += n
        return views

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, version: int) -> None:
        state = export_state_dict(model)
        with self.lock:
            for name, view in self._views().items():
                view.copy_(state[name].float())
            self.version.value = version

    def latest(self) -> int:
        return int(self.version.value)

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        """Copy the published weights into ``model``; returns their version."""
        state = model.state_dict()
        with self.lock:
            for name, view in self._views().items():
                state[name].copy_(view)
            return int(self.version.value)
