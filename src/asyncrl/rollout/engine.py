"""The one factory of generation engines. A new engine is one file plus one line in
:data:`asyncrl.core.registries.ENGINES` (an ``EngineEntry``: its import path and what it supports, so
config checks the name without importing an engine); the protocol is :class:`asyncrl.rollout.base.Engine`."""

from __future__ import annotations

from asyncrl.core.import_path import resolve
from asyncrl.core.registries import ENGINES, EngineEntry, device_type
from asyncrl.rollout.base import ChunkHook, Engine, EngineSpec

__all__ = ["ENGINES", "ChunkHook", "Engine", "EngineEntry", "EngineSpec", "generation_dtype", "make_engine"]


def make_engine(name: str, spec: EngineSpec, *, model=None, tokenizer, policy_dir=None,
                engine_kwargs: dict | None = None) -> Engine:
    """The engine ``name`` (a key of :data:`ENGINES`). ``model``: the weights to generate with (the
    transformers engine uses it as is, or a copy in ``spec.dtype``/``spec.device`` when those differ);
    ``policy_dir``: the checkpoint an engine that loads its own weights starts from;
    ``engine_kwargs``: keyword arguments of the engine's constructor (``rollout.engine_kwargs``)."""
    build = resolve(ENGINES.lookup(name).target)
    return build(spec, model=model, tokenizer=tokenizer, policy_dir=policy_dir, engine_kwargs=dict(engine_kwargs or {}))


def generation_dtype(cfg) -> str:
    """``rollout.dtype`` of ``cfg`` (a Config). ``auto``: the policy's own dtype, except that an
    engine whose entry says ``half_on_cuda`` (vLLM) generates in bfloat16 on CUDA when the policy's
    weights are float32."""
    if cfg.rollout.dtype != "auto":
        return cfg.rollout.dtype
    entry = ENGINES.get(cfg.rollout.engine)
    if entry is not None and entry.half_on_cuda and device_type(cfg.policy.device) == "cuda" \
            and cfg.policy.dtype == "float32":
        return "bfloat16"
    return cfg.policy.dtype
