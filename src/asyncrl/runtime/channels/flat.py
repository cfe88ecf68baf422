"""Weight channels on one machine: one flat tensor holding every parameter, a version counter and a
lock. The trainer publishes after each step; rollout workers pull between decode chunks. Pulling
copies under the lock, so a worker never sees half of one version and half of the next, and the
version it reads is the version of exactly the weights it copied.

``HostSharedWeights`` keeps the flat tensor in host shared memory (float32). ``CudaIpcWeights``
keeps it in GPU memory and hands it to the worker processes through CUDA IPC (torch's
multiprocessing pickles a CUDA tensor as an IPC handle): publish and pull are device-to-device
copies, in the generation dtype. GPU work is asynchronous and each process has its own CUDA
context, so both sides wait for their copies to finish before they release the lock.

A LoRA (peft) trainer publishes its *merged* weights under the base model's names
(:func:`asyncrl.policy.lora.export_state_dict`): workers hold the plain base model, and the
layout is the base model's, the same fixed size with or without LoRA."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

import torch

from asyncrl.policy.lora import export_state_dict


def _layout(model: torch.nn.Module) -> list[tuple[str, torch.Size]]:
    return [(name, p.shape) for name, p in export_state_dict(model).items()]


@dataclass
class HostSharedWeights:
    """Picklable handle (crosses ``spawn`` boundaries): pass it to worker processes."""

    flat: torch.Tensor  # [n_params], in shared memory (host) or GPU memory (CUDA IPC)
    version: "mp.sharedctypes.Synchronized"
    lock: "mp.synchronize.Lock"
    layout: list[tuple[str, torch.Size]]

    @classmethod
    def create(cls, model: torch.nn.Module, ctx: mp.context.BaseContext) -> "HostSharedWeights":
        layout = _layout(model)
        flat = torch.zeros(sum(s.numel() for _, s in layout), dtype=torch.float32).share_memory_()
        return cls(flat, ctx.Value("q", -1, lock=False), ctx.Lock(), layout)

    def _views(self) -> list[tuple[str, torch.Tensor]]:
        views, offset = [], 0
        for name, shape in self.layout:
            n = shape.numel()
            views.append((name, self.flat[offset:offset + n].view(shape)))
            offset += n
        return views

    def _wait(self) -> None:
        """Block until this process's copies into/out of ``flat`` have finished (GPU: async)."""

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, version: int) -> None:
        state = export_state_dict(model)
        views = self._views()
        with self.lock:
            torch._foreach_copy_([v for _, v in views], [state[name].detach() for name, _ in views])
            self._wait()
            self.version.value = version

    def latest(self) -> int:
        return int(self.version.value)

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        """Copy the published weights into ``model``; returns their version."""
        state = model.state_dict()
        views = self._views()
        with self.lock:
            torch._foreach_copy_([state[name] for name, _ in views], [v for _, v in views])
            self._wait()
            return int(self.version.value)


@dataclass
class CudaIpcWeights(HostSharedWeights):
    """The flat tensor on the trainer's GPU, shared with workers on the same GPU (CUDA IPC)."""

    @classmethod
    def create(cls, model: torch.nn.Module, ctx: mp.context.BaseContext, *, device: str = "cuda",
               dtype: torch.dtype = torch.bfloat16) -> "CudaIpcWeights":
        if not torch.cuda.is_available():
            raise RuntimeError("the cuda weight channel needs a CUDA device")
        layout = _layout(model)
        flat = torch.zeros(sum(s.numel() for _, s in layout), dtype=dtype, device=device)
        return cls(flat, ctx.Value("q", -1, lock=False), ctx.Lock(), layout)

    def _wait(self) -> None:
        torch.cuda.current_stream(self.flat.device).synchronize()


def open_shm(model: torch.nn.Module, *, ctx, **_) -> HostSharedWeights:
    """The ``shm`` entry of :data:`asyncrl.registries.CHANNELS`."""
    return HostSharedWeights.create(model, ctx)


def open_cuda(model: torch.nn.Module, *, ctx, device, dtype, **_) -> CudaIpcWeights:
    """The ``cuda`` entry of :data:`asyncrl.registries.CHANNELS`."""
    return CudaIpcWeights.create(model, ctx, device=device, dtype=dtype)
