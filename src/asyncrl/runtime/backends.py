"""Where rollout workers run: ``local`` (processes on this machine) or ``ray`` (actors on a Ray
cluster: :func:`asyncrl.runtime.ray.ray_pool`). Each backend returns a pool (submit / poll /
restart_dead / wait_ready / n_inflight / restarts / shutdown) and the weight channel its workers
pull from. A new backend is one function plus one line in :data:`asyncrl.core.registries.BACKENDS`
(a ``BackendEntry``: its import path, what it offers a weight channel, and the channels ``auto``
picks from)."""

from __future__ import annotations

import torch
import torch.multiprocessing as tmp

from asyncrl.config import Config
from asyncrl.core.import_path import resolve
from asyncrl.core.registries import BACKENDS, ENGINES
from asyncrl.runtime.channels import channel_name, open_channel
from asyncrl.runtime.engines import generation_dtype
from asyncrl.runtime.pool import WorkerPool
from asyncrl.runtime.worker import WorkerSpec


def open_run_channel(cfg: Config, model: torch.nn.Module, ctx=None):
    """The run's weight channel (``async.weight_channel``, ``auto`` resolved), holding ``model``'s
    weights as version 0 in the generation dtype."""
    from asyncrl.policy.model import DTYPES

    name = channel_name(cfg.async_.weight_channel, cfg.async_.backend, cfg.policy.device)
    return open_channel(name, model, ctx=ctx, device=cfg.policy.device, dtype=DTYPES[generation_dtype(cfg)],
                        max_buffers=cfg.async_.channel_buffers or cfg.async_.n_workers + 1)


def local_pool(cfg: Config, specs: list[WorkerSpec], model: torch.nn.Module):
    ctx = tmp.get_context("spawn")  # torch's context: CUDA tensors cross as IPC handles
    channel = open_run_channel(cfg, model, ctx)
    return WorkerPool(ctx, specs, channel, start_timeout_s(cfg)), channel


def start_timeout_s(cfg: Config) -> float:
    """``async.worker_start_timeout_s``, or (0) the bound of ``rollout.engine``'s entry on the device."""
    if cfg.async_.worker_start_timeout_s > 0:
        return cfg.async_.worker_start_timeout_s
    cpu_s, cuda_s = ENGINES[cfg.rollout.engine].start_s
    return cuda_s if torch.device(cfg.policy.device).type == "cuda" else cpu_s


def open_backend(cfg: Config, specs: list[WorkerSpec], model: torch.nn.Module):
    """(pool, channel) of ``async.backend``; the channel holds ``model``'s weights as version 0."""
    return resolve(BACKENDS[cfg.async_.backend].target)(cfg, specs, model)
