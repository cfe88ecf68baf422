"""The names a run picks its runtime parts by: ``run.mode`` → :data:`MODES`, ``async.backend`` →
:data:`BACKENDS`, ``async.weight_channel`` → :data:`CHANNELS`, ``rollout.engine`` → :data:`ENGINES`.

Every extension registry of asyncrl is one class, :class:`asyncrl.core.registry.Registry`: a dict,
name → entry, labelled with the config key it serves, whose ``lookup`` gives one error line (the
key, the bad value, close matches, the known names) and which may hold prefix families
(``gem:<id>``). An entry here is a small frozen record that says what builds the part and what the
part needs and works with. Code asks the entries (their fields, :meth:`ChannelEntry.refuses`,
:func:`auto_channel`) and never compares a name. The other registries sit beside their parts:
``asyncrl.tasks.TASKS``, ``asyncrl.objectives.LOSSES`` and ``PROX_STRATEGIES``,
``asyncrl.tracking.TRACKERS``, ``asyncrl.agents.ENVIRONMENTS``, ``asyncrl.agents.toolset.TOOLS``,
``asyncrl.agents.tool_formats.FORMATS``, ``asyncrl.training.reference.KL_ESTIMATORS``,
``asyncrl.training.lr_schedule.SHAPES`` (and, in the repository's benchmark apparatus,
``benchmarks.bench.suites.SUITES``).

An entry here names what builds its part by import path (``target``, ``"module:attr"``), so config
checks names and compatibilities without importing the runtime, which imports a part only when it
builds one (:func:`asyncrl.core.import_path.resolve`).

From outside the package, a plugin module adds entries at import time and is named in
``run.plugins``, which every process of a run (the trainer, each rollout worker, each bench cell)
imports before it checks a name::

    from asyncrl.core.registries import MODES, ModeEntry
    MODES["replay"] = ModeEntry("my_pkg.replay:ReplaySource")
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.core.import_path import resolve  # the one resolver, re-exported for plugins that build parts
from asyncrl.core.registry import Registry

__all__ = ["BACKENDS", "CHANNELS", "ENGINES", "HOST", "MODES", "RAY", "BackendEntry", "ChannelEntry", "EngineEntry",
           "ModeEntry", "Registry", "auto_channel", "device_type", "resolve"]

# What a worker backend offers a weight channel (BackendEntry.provides, ChannelEntry.needs), and how
# an error message says it. A plugin may add a word of its own.
HOST = "host"  # the workers run on the trainer's machine: host shared memory and CUDA IPC reach them
RAY = "ray"  # the workers are Ray actors: Ray's object store reaches them
NEEDS_WORDS = {HOST: "workers on the trainer's machine", RAY: "Ray actors (async.backend=ray)"}


def device_type(device: str) -> str:
    """The kind of a ``policy.device`` value: ``"cuda:1"`` → ``"cuda"``."""
    return device.partition(":")[0]


@dataclass(frozen=True)
class ModeEntry:
    """``run.mode``: a batch source, a context manager with next_batch, publish, ... (docs/runtime.md)."""

    target: str  # "module:attr" called (cfg, session)
    # generation runs ahead of training within a window (async.max_ahead), which async.adaptive steers
    window: bool = False
    # it generates in rollout worker processes (async.n_workers on async.backend); False: in the
    # trainer's own process, where a torchrun world's process group already exists
    rollout_workers: bool = False


@dataclass(frozen=True)
class BackendEntry:
    """``async.backend``: where rollout workers run."""

    target: str  # "module:attr" called (cfg, worker specs, model) -> (worker pool, weight channel)
    provides: frozenset[str] = frozenset({HOST})  # what a weight channel may rely on (HOST, RAY, ...)
    # async.weight_channel=auto: the first of these channels that works with this backend and device
    auto_channels: tuple[str, ...] = ("cuda", "shm")
    # policy.device=cuda: its workers run on the trainer's GPU (local processes do; Ray actors need not)
    workers_on_trainer_gpu: bool = True


@dataclass(frozen=True)
class ChannelEntry:
    """``async.weight_channel``: how the trainer's weights reach the workers."""

    target: str  # "module:attr" called (model, ctx=, device=, dtype=) -> WeightChannel
    needs: frozenset[str] = frozenset()  # what the backend must provide (BackendEntry.provides)
    devices: frozenset[str] | None = None  # the policy.device kinds it works on; None = any
    # on CUDA its two ends must be on different GPUs (NCCL refuses two ranks on one device)
    own_gpu: bool = False
    # each worker holds a receive buffer as large as the weights on its device (what an engine's
    # memory share must leave room for)
    receive_buffer: bool = False

    def refuses(self, backend: str, device: str) -> str | None:
        """Why this channel does not work with ``backend`` and ``device`` (a phrase that follows
        the channel's name), or None. An unknown backend is its own key's error, not this one."""
        provided = BACKENDS[backend].provides if backend in BACKENDS else self.needs
        missing = sorted(self.needs - provided)
        if missing:
            needed = " and ".join(NEEDS_WORDS.get(need, need) for need in missing)
            return f"does not work with async.backend={backend!r} (it needs {needed})"
        if self.devices is not None and device_type(device) not in self.devices:
            return f"needs policy.device={'|'.join(sorted(self.devices))}, got {device!r}"
        shares_gpu = backend in BACKENDS and BACKENDS[backend].workers_on_trainer_gpu
        if self.own_gpu and device_type(device) == "cuda" and shares_gpu:
            return (f"needs rollout workers on GPUs of their own (NCCL refuses two ranks on one GPU), but "
                    f"async.backend={backend} runs them on the trainer's; use async.weight_channel=cuda or auto")
        return None


@dataclass(frozen=True)
class EngineEntry:
    """``rollout.engine``: the generation engine (the protocol: asyncrl.rollout.base.Engine)."""

    target: str  # "module:function" called (spec, model=, tokenizer=, policy_dir=, engine_kwargs=) -> Engine
    # True: the engine loads its weights from the checkpoint and keeps them itself (vLLM), so pulled
    # weights land in a staging model on policy.device first; False: it generates with the nn.Module
    # it is given (which weight channels fill directly)
    owns_weights: bool
    devices: frozenset[str] | None = None  # the policy.device kinds it runs on; None = any
    lm_head_fp32: bool = False  # honours policy.lm_head_fp32 (the output head's matmul in float32)
    # rollout.dtype=auto on CUDA with float32 master weights: generate in bfloat16 (an inference
    # engine's fp32 kernels are slow and its weights and KV cache twice the size) rather than fp32
    half_on_cuda: bool = False
    # seconds a rollout worker building it may take to start (async.worker_start_timeout_s=0), on
    # the CPU and on CUDA
    start_s: tuple[float, float] = (300.0, 300.0)
    # it runs on its process's first visible GPU whatever index policy.device names (vLLM's
    # in-process executor takes cuda:0): cuda:N with N > 0 is refused in one line
    first_gpu_only: bool = False
    # it sets up a torch.distributed world of its own (vLLM), which hangs or fails inside a process
    # of a torchrun world: with trainer ranks > 1 it must run in rollout workers
    own_world: bool = False
    # a rollout worker building it may be pinned to one CPU core; False for one whose start compiles
    # on many threads (torch.compile, CUDA graphs), which one core would serialize
    pin_cpu: bool = True


# Listed in the order `asyncrl train --help` shows them.
MODES: Registry[ModeEntry] = Registry("run.mode", {
    "sync": ModeEntry("asyncrl.runtime.sources.lockstep:sync_source"),
    "async": ModeEntry("asyncrl.runtime.sources.async_source:AsyncSource", window=True, rollout_workers=True),
    "simulated": ModeEntry("asyncrl.runtime.sources.lockstep:simulated_source"),
})

BACKENDS: Registry[BackendEntry] = Registry("async.backend", {
    "local": BackendEntry("asyncrl.runtime.backends:local_pool"),
    "ray": BackendEntry("asyncrl.runtime.ray:ray_pool", provides=frozenset({RAY}), auto_channels=("ray",),
                        workers_on_trainer_gpu=False),
})

CHANNELS: Registry[ChannelEntry] = Registry("async.weight_channel", {
    "shm": ChannelEntry("asyncrl.runtime.channels.flat:open_shm", needs=frozenset({HOST})),
    "cuda": ChannelEntry("asyncrl.runtime.channels.flat:open_cuda", needs=frozenset({HOST}),
                         devices=frozenset({"cuda"})),
    "ray": ChannelEntry("asyncrl.runtime.ray.store:open_ray", needs=frozenset({RAY})),
    "collective": ChannelEntry("asyncrl.runtime.channels.collective:open_collective", own_gpu=True,
                               receive_buffer=True),
})

ENGINES: Registry[EngineEntry] = Registry("rollout.engine", {
    "transformers": EngineEntry("asyncrl.rollout.hf_engine:build", owns_weights=False, lm_head_fp32=True),
    # on CUDA a 7B engine's start (weights, memory profile, CUDA graph capture) can pass 300 s
    "vllm": EngineEntry("asyncrl.rollout.vllm_engine:build", owns_weights=True, half_on_cuda=True,
                        start_s=(300.0, 1200.0), first_gpu_only=True, own_world=True, pin_cpu=False),
})


def auto_channel(backend: str, device: str) -> str | None:
    """The channel ``async.weight_channel=auto`` stands for: the first of the backend's
    ``auto_channels`` that works with it on ``device``; None when none does."""
    for name in BACKENDS[backend].auto_channels:
        if name in CHANNELS and CHANNELS[name].refuses(backend, device) is None:
            return name
    return None
