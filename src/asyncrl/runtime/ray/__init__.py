"""Everything asyncrl does with Ray (``async.backend=ray``, ``async.weight_channel=ray``), in one
place. Ray is an optional dependency: this package's own module imports no Ray, nor does
:mod:`.reaper`; the others do, and load only when a run picks the Ray backend or channel.

* :mod:`.cluster`: join ``RAY_ADDRESS``, or start the run's private cluster on loopback and end it
  with the run.
* :mod:`.local`: what a private cluster must not do to the trainer (its temp folder, the stop
  signals, a dead raylet), and how the run prevents it.
* :mod:`.reaper`: the small process, standard library only, that ends a private cluster's processes
  however the trainer ends.
* :mod:`.backend`: rollout workers as Ray actors (``RayPool``, the local pool's surface).
* :mod:`.store`: the weight channel through Ray's object store.

:func:`ray_pool` is the ``ray`` entry of :data:`asyncrl.core.registries.BACKENDS`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from asyncrl.config import Config
    from asyncrl.runtime.worker import WorkerSpec


def ray_pool(cfg: Config, specs: list[WorkerSpec], model: torch.nn.Module):
    """(RayPool, channel): the actors on the Ray cluster (joined or started here), and the weight
    channel holding ``model``'s weights as version 0. A missing Ray is a config error, said in one
    line."""
    from asyncrl.config import ConfigError
    from asyncrl.runtime.backends import open_run_channel, start_timeout_s

    try:
        from asyncrl.runtime.ray.backend import RayPool
        from asyncrl.runtime.ray.cluster import init_ray
    except ImportError as err:
        raise ConfigError("async.backend", f"ray is not installed ({err}); "
                          "pip install 'asyncrl[ray]' torch==<your torch version>") from None
    owns_ray = init_ray(len(specs), trainer_gpus=_trainer_gpus_kept_out(cfg))
    channel = open_run_channel(cfg, model)
    return RayPool(specs, channel, start_timeout_s(cfg), owns_ray=owns_ray), channel


def _trainer_gpus_kept_out(cfg: Config, environ: Mapping[str, str] = os.environ) -> list[int] | None:
    """The trainer ranks' GPU indices on this node when Ray actors ask for whole GPUs
    (``async.gpus_per_worker`` ≥ 1): those must be others than any trainer's. Under torchrun every
    rank of the node trains on GPU ``LOCAL_RANK`` (asyncrl.distributed.world), so the private
    cluster rank 0 starts must leave out all ``LOCAL_WORLD_SIZE`` of them, not rank 0's alone.
    Actors with a fraction share the trainer's on purpose: None."""
    import torch

    from asyncrl.runtime.worker import worker_gpu_share

    device = torch.device(cfg.policy.device)
    if device.type != "cuda" or worker_gpu_share(cfg) < 1:
        return None
    local = environ.get("LOCAL_WORLD_SIZE", "")
    if local.isdigit() and int(local) > 1:
        return list(range(int(local)))
    return [device.index if device.index is not None else 0]
