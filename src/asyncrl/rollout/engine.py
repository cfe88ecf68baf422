"""The one factory of generation engines. A new engine is one file plus one line in :data:`ENGINES`;
the protocol is :class:`asyncrl.rollout.base.Engine`."""

from __future__ import annotations

from collections.abc import Callable

from asyncrl.rollout.base import ChunkHook, Engine, EngineSpec

__all__ = ["ENGINES", "ChunkHook", "Engine", "EngineSpec", "make_engine"]


def _transformers(spec: EngineSpec, *, model, tokenizer, policy_dir=None, **_):
    from asyncrl.rollout.hf_engine import TransformersEngine

    return TransformersEngine(model, tokenizer, spec)


def _vllm(spec: EngineSpec, *, tokenizer, policy_dir, vllm_kwargs=None, **_):
    from asyncrl.rollout.vllm_engine import VLLMEngine

    return VLLMEngine(policy_dir, tokenizer, spec, **(vllm_kwargs or {}))


ENGINES: dict[str, Callable[..., Engine]] = {"transformers": _transformers, "vllm": _vllm}


def make_engine(name: str, spec: EngineSpec, *, model=None, tokenizer, policy_dir=None,
                vllm_kwargs: dict | None = None) -> Engine:
    """The engine ``name`` (a key of :data:`ENGINES`). ``model``: the weights to generate with (the
    transformers engine uses it as is, or a copy in ``spec.dtype``/``spec.device`` when those differ);
    ``policy_dir``: the checkpoint an engine that loads its own weights starts from."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (known: {', '.join(sorted(ENGINES))})")
    return ENGINES[name](spec, model=model, tokenizer=tokenizer, policy_dir=policy_dir, vllm_kwargs=vllm_kwargs)
