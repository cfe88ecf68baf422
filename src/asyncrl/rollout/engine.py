"""The generation-engine seam: what every engine does, and the one factory that builds them.

An engine turns prompts (token ids) into version-tagged completions. Between decode chunks it
calls a hook that may hand it new weights (:meth:`Engine.update_weights`); tokens generated after
that carry the new version. A new engine is one file plus one line in :data:`ENGINES`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from asyncrl.types import Generation

# Called between decode chunks while some sequence is unfinished; returns True when it loaded new
# weights into the engine (which then continues the same sequences with them).
ChunkHook = Callable[[], bool]


@runtime_checkable
class Engine(Protocol):
    spec: "EngineSpec"
    version: int  # version of the weights the engine generates with now

    def generate(self, prompts: list[list[int]], *, between_chunks: ChunkHook | None = None) -> Generation:
        """One completion per prompt; rows in prompt order; the Generation's tensors on the CPU."""

    def update_weights(self, weights: torch.nn.Module | Mapping[str, torch.Tensor], version: int) -> None:
        """Take new weights (a model, or a state dict under the base model's names)."""


@dataclass
class EngineSpec:
    """What any engine needs, whatever it is built on."""

    max_new_tokens: int
    temperature: float  # 0 = greedy
    seed: int = 0
    chunk_tokens: int | None = None  # tokens between hook calls; None = one chunk
    device: str = "cpu"
    dtype: str = "float32"  # generation weights


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
