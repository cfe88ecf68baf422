"""What every generation engine is: the ``Engine`` protocol and the settings it is built from.

An engine turns prompts (token ids) into version-tagged completions. Between decode chunks it
calls a hook that may hand it new weights (:meth:`Engine.update_weights`); tokens generated after
that carry the new version.

An engine may also offer ``with_sampling(spec) -> Engine``: a :class:`SamplingView` of itself (its
weights, device and sampler) that generates with ``spec``'s sampling settings instead of its own;
its ``generate`` then takes ``sampling=`` (an :class:`EngineSpec`, None = its own). Evaluation
generates through such an engine when the run holds one in its process
(:mod:`asyncrl.runtime.evaluate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from asyncrl.types import Generation

# Called between decode chunks while some sequence is unfinished; returns True when it loaded new
# weights into the engine (which then continues the same sequences with them).
ChunkHook = Callable[[], bool]


@runtime_checkable
class Engine(Protocol):
    spec: "EngineSpec"  # noqa: F821 (defined below)
    version: int  # version of the weights the engine generates with now

    def generate(self, prompts: list[list[int]], *, between_chunks: ChunkHook | None = None,
                 max_new_tokens: int | None = None, stop: Sequence[str] = ()) -> Generation:
        """One completion per prompt; rows in prompt order; the Generation's tensors on the CPU.
        ``max_new_tokens``: this call's limit (None = ``spec.max_new_tokens``); ``stop``: strings
        that end a row once its generated text contains one, the token completing it kept (a turn
        of an episode ends at ``</tool_call>``)."""

    def update_weights(self, weights: torch.nn.Module | Mapping[str, torch.Tensor], version: int) -> None:
        """Take new weights (a model, or a state dict under the base model's names)."""

    def rng_state(self) -> dict:
        """The sampler's random state, in types ``torch.load(weights_only=True)`` accepts."""

    def set_rng_state(self, state: dict) -> None:
        """Restore what :meth:`rng_state` returned (a resumed run then samples the same tokens)."""


@dataclass
class EngineSpec:
    """What any engine needs, whatever it is built on."""

    max_new_tokens: int
    temperature: float  # 0 = greedy
    seed: int = 0
    chunk_tokens: int | None = None  # tokens between hook calls; None = one chunk
    device: str = "cpu"
    dtype: str = "float32"  # generation weights
    top_p: float = 1.0  # nucleus sampling; 1 = off
    top_k: int = 0  # top-k sampling; 0 = off
    lm_head_fp32: bool = False  # the output head's matmul in float32 (policy.lm_head_fp32)


class SamplingView:
    """``engine`` generating with ``spec``'s sampling settings (temperature, top_p, top_k,
    max_new_tokens, chunk_tokens): the same weights, device and sampler, so a weight update of the
    engine is one of the view too. ``engine.generate`` must take ``sampling=``."""

    def __init__(self, engine, spec: EngineSpec):
        self.engine, self.spec = engine, spec

    @property
    def version(self) -> int:
        return self.engine.version

    @property
    def max_model_len(self) -> int | None:
        """The engine's context window (prompt + completion), None where it has none."""
        return getattr(self.engine, "max_model_len", None)

    def generate(self, prompts: list[list[int]], **kwargs) -> Generation:
        return self.engine.generate(prompts, sampling=self.spec, **kwargs)
