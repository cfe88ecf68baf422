"""The one factory of generation engines. A new engine is one file plus one line in :data:`ENGINES`;
the protocol is :class:`asyncrl.rollout.base.Engine`."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from asyncrl.rollout.base import ChunkHook, Engine, EngineSpec

__all__ = ["ENGINES", "ChunkHook", "Engine", "EngineEntry", "EngineSpec", "make_engine"]


@dataclass(frozen=True)
class EngineEntry:
    # "module:function" building the engine; imported only when an engine is made, so reading the
    # registry's names (config validation) imports no engine
    target: str
    # True: the engine loads its weights from the checkpoint and keeps them itself (vLLM), so
    # pulled weights land in a CPU staging model first; False: it generates with the nn.Module it
    # is given (which weight channels fill directly)
    owns_weights: bool

    def build(self, spec: EngineSpec, **kwargs) -> Engine:
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)(spec, **kwargs)


ENGINES: dict[str, EngineEntry] = {
    "transformers": EngineEntry("asyncrl.rollout.hf_engine:build", owns_weights=False),
    "vllm": EngineEntry("asyncrl.rollout.vllm_engine:build", owns_weights=True),
}


def make_engine(name: str, spec: EngineSpec, *, model=None, tokenizer, policy_dir=None,
                vllm_kwargs: dict | None = None) -> Engine:
    """The engine ``name`` (a key of :data:`ENGINES`). ``model``: the weights to generate with (the
    transformers engine uses it as is, or a copy in ``spec.dtype``/``spec.device`` when those differ);
    ``policy_dir``: the checkpoint an engine that loads its own weights starts from."""
    if name not in ENGINES:
        raise ValueError(f"unknown engine {name!r} (known: {', '.join(sorted(ENGINES))})")
    return ENGINES[name].build(spec, model=model, tokenizer=tokenizer, policy_dir=policy_dir,
                               vllm_kwargs=vllm_kwargs)
