"""Where rollout workers run: ``local`` (processes on this machine, weights in shared memory) or
``ray`` (actors on a Ray cluster, weights through the object store). Both yield a pool with the
same methods (submit / poll / restart_dead / wait_ready / n_inflight / restarts) and a weight
channel with ``publish(model, version)``."""

from __future__ import annotations

from contextlib import contextmanager

import torch.multiprocessing as tmp

from asyncrl.config import Config, ConfigError
from asyncrl.pretrain import pretrained_dir
from asyncrl.runtime.pool import WorkerPool
from asyncrl.runtime.weights import SharedWeights


def policy_dir_of(cfg: Config) -> str:
    return cfg.policy.model_path or str(pretrained_dir(cfg))


@contextmanager
def open_backend(cfg: Config, session):
    from asyncrl.runtime.async_local import worker_specs

    specs = worker_specs(cfg, policy_dir_of(cfg))
    if cfg.async_.backend == "ray":
        try:
            from asyncrl.runtime.ray_backend import RayPool
        except ImportError as err:
            raise ConfigError("async.backend", f"ray is not installed ({err}); "
                              "pip install 'asyncrl[ray]' torch==2.13.0") from None
        pool = RayPool(specs, session.model, cfg.async_.worker_start_timeout_s)
        try:
            yield pool, pool
        finally:
            pool.shutdown()
        return
    ctx = tmp.get_context("spawn")
    shared = SharedWeights.create(session.model, ctx, version=0)
    pool = WorkerPool(ctx, specs, shared, cfg.async_.worker_start_timeout_s)
    try:
        yield pool, shared
    finally:
        pool.shutdown()
