"""Weight channels on one machine: the trainer publishes after each step, rollout workers pull
between decode chunks, and no worker, alive or dead, can block a publish.

Two flat buffers each hold every parameter (``flat [2, n_params]``) and a sequence counter in shared
memory says which one is published. There is one writer, the trainer, so nothing needs a lock:

* **publish** marks the counter odd (a publish is under way), writes the buffer that is *not*
  published, waits for the copy to finish, records that buffer's version and makes the counter even
  again, which publishes it. Publish ``k`` takes the counter from ``2k - 2`` through ``2k - 1`` to
  ``2k``; the published buffer is ``(counter // 2) % 2``.
* **pull** reads the counter, copies the buffer it names into the model, waits for the copy to
  finish, reads that buffer's version and reads the counter again. The buffer was rewritten during
  the copy only if a later publish began writing it, which moves the counter to
  ``2 * (first // 2) + 3`` or beyond: two publishes during one copy. Then the pull copies again
  (after a millisecond's sleep), up to :data:`PULL_ATTEMPTS` times, and raises ``RuntimeError`` if
  the trainer publishes faster than the worker can copy (a training step, which reads every weight
  several times, lasts longer than one copy).

So a worker never sees half of one version and half of the next, the version it reads is the
version of exactly the weights it copied, and a worker SIGKILLed mid-pull leaves nothing held:
publishes go on and the next worker pulls the latest version. Memory: twice one flat copy of the
weights. A tied weight (a tied LM head: ``tie_word_embeddings``) is held and copied once, under
its first name; a receiver that does not tie the pair itself gets the second name filled from it.

The counter and the versions are 8-byte integers in shared memory (``multiprocessing`` values
without a lock), each read and written in one access. The order of the accesses matters: on x86-64
stores are not reordered with stores nor loads with loads; :func:`_fence` keeps that order on
weaker memory models too.

``HostSharedWeights`` keeps the two buffers in host shared memory (float32: 8 bytes a parameter
for both). ``CudaIpcWeights`` keeps them in GPU memory and hands them to the worker processes
through CUDA IPC (torch's multiprocessing pickles a CUDA tensor as an IPC handle): publish and pull
are device-to-device copies, in the generation dtype, and the buffers cost twice the generation-dtype
weights on the GPU (1.8 GiB for Qwen2.5-0.5B in bf16, its tied head once), beside the trainer's and
the worker's own copies. GPU work is asynchronous and each process has its own CUDA context, so
both sides wait for their copies to finish (``_wait``) before they touch the counter: the writer
before it publishes the buffer, the reader before it re-reads the counter.

A LoRA (peft) trainer publishes its *merged* weights under the base model's names
(:func:`asyncrl.policy.lora.export_state_dict`): workers hold the plain base model, and the
layout is the base model's, the same fixed size with or without LoRA."""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field

import torch

from asyncrl.policy.lora import export_state_dict

# A pull copies again only when two publishes began during its copy; this many in a row means the
# trainer publishes faster than the worker copies, which no amount of waiting fixes.
PULL_ATTEMPTS = 100
PULL_RETRY_SLEEP_S = 0.001

_FENCE_LOCK = threading.Lock()  # private to this process: no other process can hold it


def _fence() -> None:
    """Keep this process's memory accesses before the call ahead of those after it, as other
    processes see them. A lock's release followed by its acquire is such a barrier (a release keeps
    earlier accesses before it, an acquire keeps later ones after it, and the pair stays in order).
    On x86-64 the copies and counter accesses are already in order; this costs well under a
    microsecond."""
    with _FENCE_LOCK:
        pass
    with _FENCE_LOCK:
        pass


def tied_names(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """{name: the earlier name it shares its tensor with} for tied weights (a tied LM head is the
    embedding): the same memory, shape and strides. Channels send such a tensor once."""
    first: dict[tuple, str] = {}
    tied: dict[str, str] = {}
    for name, tensor in state.items():
        if tensor.numel() == 0 or tensor.is_meta:  # these may all report address 0
            continue
        key = (tensor.device, tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())
        if key in first:
            tied[name] = first[key]
        else:
            first[key] = name
    return tied


def weight_layout(model: torch.nn.Module) -> list[tuple[str, torch.Size]]:
    """(name, shape) of each published tensor, in the order a flat buffer holds them; a tied
    weight once, under its first name (:func:`tied_names`)."""
    state = export_state_dict(model)
    tied = tied_names(state)
    return [(name, p.shape) for name, p in state.items() if name not in tied]


@torch.no_grad()
def fill_tied(state: dict[str, torch.Tensor], tied: dict[str, str]) -> None:
    """After a pull into ``state`` (a receiver's state dict): each tied name copied from the name
    it was sent under, unless the receiver ties them itself (then they are one tensor already)."""
    for name, source in tied.items():
        if name in state and state[name].data_ptr() != state[source].data_ptr():
            state[name].copy_(state[source])


def flat_views(flat: torch.Tensor, layout: list[tuple[str, torch.Size]]) -> list[tuple[str, torch.Tensor]]:
    """(name, view) of each tensor of ``layout`` inside the 1-D ``flat`` (no copy)."""
    views, offset = [], 0
    for name, shape in layout:
        n = shape.numel()
        views.append((name, flat[offset:offset + n].view(shape)))
        offset += n
    return views


def _shared_counters(ctx: mp.context.BaseContext):
    """(sequence counter 0, the version of each buffer [-1, -1], the latest published version -1)."""
    return ctx.Value("q", 0, lock=False), ctx.Array("q", [-1, -1], lock=False), ctx.Value("q", -1, lock=False)


@dataclass
class HostSharedWeights:
    """Picklable handle (crosses ``spawn`` boundaries as a process argument): pass it to worker
    processes. The two buffers and the counters are shared; ``retries`` counts this process's own
    pulls that had to copy again."""

    flat: torch.Tensor  # [2, n_params], in shared memory (host) or GPU memory (CUDA IPC)
    seq: ctypes.c_longlong  # odd while a publish writes; the published buffer is (seq // 2) % 2
    buffer_versions: ctypes.Array  # [2]: the version each buffer holds (-1: none yet)
    version: ctypes.c_longlong  # the latest published version, set after its buffer is published
    layout: list[tuple[str, torch.Size]]
    tied: dict[str, str] = field(default_factory=dict)  # name -> the layout name it is tied to
    retries: int = 0

    @classmethod
    def create(cls, model: torch.nn.Module, ctx: mp.context.BaseContext) -> HostSharedWeights:
        layout = weight_layout(model)
        flat = torch.zeros(2, sum(s.numel() for _, s in layout), dtype=torch.float32).share_memory_()
        return cls(flat, *_shared_counters(ctx), layout, tied_names(export_state_dict(model)))

    def _views(self, buffer: int) -> list[tuple[str, torch.Tensor]]:
        return flat_views(self.flat[buffer], self.layout)

    def _wait(self) -> None:
        """Block until this process's copies into/out of ``flat`` have finished (GPU: async)."""

    def _copy_out(self, destinations: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
        """A pull's copy from one buffer into the model's tensors (tests slow it down)."""
        torch._foreach_copy_(destinations, sources)

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, version: int) -> None:
        state = export_state_dict(model)
        if self.seq.value % 2 == 0:  # odd while writing; still odd if the last publish raised midway
            self.seq.value += 1
        writing = self.seq.value
        target = (writing // 2 + 1) % 2  # the buffer readers are not directed to
        views = self._views(target)
        _fence()
        torch._foreach_copy_([v for _, v in views], [state[name].detach() for name, _ in views])
        self._wait()
        self.buffer_versions[target] = version
        _fence()
        self.seq.value = writing + 1
        _fence()
        self.version.value = version

    def latest(self) -> int:
        return int(self.version.value)

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int:
        """Copy the published weights into ``model``; returns their version. Raises
        ``RuntimeError`` (leaving ``model`` holding a mix) if :data:`PULL_ATTEMPTS` copies in a row
        were overwritten."""
        state = model.state_dict()
        for _ in range(PULL_ATTEMPTS):
            seen = self.seq.value
            published = (seen // 2) % 2
            views = self._views(published)
            _fence()
            self._copy_out([state[name] for name, _ in views], [v for _, v in views])
            self._wait()
            version = self.buffer_versions[published]
            _fence()
            if self.seq.value < 2 * (seen // 2) + 3:  # no later publish began writing this buffer
                fill_tied(state, self.tied)
                return int(version)
            self.retries += 1
            time.sleep(PULL_RETRY_SLEEP_S)
        raise RuntimeError(f"weight pull: the buffer was rewritten during each of {PULL_ATTEMPTS} copies in a "
                           f"row; the trainer publishes faster than a worker copies {self.flat.shape[1]} weights")


@dataclass
class CudaIpcWeights(HostSharedWeights):
    """The two buffers on the trainer's GPU, shared with workers on the same GPU (CUDA IPC)."""

    @classmethod
    def create(cls, model: torch.nn.Module, ctx: mp.context.BaseContext, *, device: str = "cuda",
               dtype: torch.dtype = torch.bfloat16) -> CudaIpcWeights:
        if not torch.cuda.is_available():
            raise RuntimeError("the cuda weight channel needs a CUDA device")
        layout = weight_layout(model)
        flat = torch.zeros(2, sum(s.numel() for _, s in layout), dtype=dtype, device=device)
        return cls(flat, *_shared_counters(ctx), layout, tied_names(export_state_dict(model)))

    def _wait(self) -> None:
        torch.cuda.current_stream(self.flat.device).synchronize()


def open_shm(model: torch.nn.Module, *, ctx, **_) -> HostSharedWeights:
    """The ``shm`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return HostSharedWeights.create(model, ctx)


def open_cuda(model: torch.nn.Module, *, ctx, device, dtype, **_) -> CudaIpcWeights:
    """The ``cuda`` entry of :data:`asyncrl.core.registries.CHANNELS`."""
    return CudaIpcWeights.create(model, ctx, device=device, dtype=dtype)
