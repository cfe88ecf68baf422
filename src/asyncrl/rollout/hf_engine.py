"""Generation on ``transformers`` (CPU or GPU): the KV-cache decode loop, in chunks with a weight
swap in between.

The engine generates with ``model`` itself when it already has the generation dtype and device
(sync mode on one device: no copy at all), otherwise with its own copy that
:meth:`TransformersEngine.update_weights` refreshes. After new weights arrive mid-generation, the
prefix (prompt + tokens so far) is re-run with them, so later tokens come exactly from the new
weights and carry their version. Each forward pass computes the logits of the last position only
(:mod:`asyncrl.policy.sampling`); ``spec.lm_head_fp32`` runs the output head in float32.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from asyncrl.core.loader import ConfigError
from asyncrl.policy.model import DTYPES, plain_copy
from asyncrl.policy.sampling import StopStrings, decode, left_pad, prefill, to_generation
from asyncrl.rollout.base import ChunkHook, EngineSpec
from asyncrl.types import Generation


def _needs_copy(model: torch.nn.Module, device: torch.device, dtype: torch.dtype) -> bool:
    param = next(model.parameters())
    same_device = param.device.type == device.type and (device.index is None or param.device.index == device.index)
    return not same_device or param.dtype != dtype


class TransformersEngine:
    def __init__(self, model: torch.nn.Module, tokenizer, spec: EngineSpec):
        self.spec = spec
        self.tokenizer = tokenizer
        self.device = torch.device(spec.device)
        dtype = DTYPES[spec.dtype]
        if _needs_copy(model, self.device, dtype):
            model = plain_copy(model, self.device, dtype)
        self.model = model
        self.version = 0
        # the generator lives on the device it samples on (multinomial on CUDA needs a CUDA generator)
        self.generator = torch.Generator(device=self.device).manual_seed(spec.seed)

    def rng_state(self) -> dict:
        """The sampling generator's state (part of a checkpoint: resumed runs sample the same tokens)."""
        return {"generator": self.generator.get_state()}

    def set_rng_state(self, state: dict) -> None:
        self.generator.set_state(state["generator"])

    @torch.no_grad()
    def update_weights(self, weights: torch.nn.Module | Mapping[str, torch.Tensor], version: int) -> None:
        if weights is not self.model:
            from asyncrl.policy.lora import export_state_dict

            state = export_state_dict(weights) if isinstance(weights, torch.nn.Module) else weights
            own = self.model.state_dict()
            for name, tensor in state.items():
                own[name].copy_(tensor)
        self.version = version

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], *, between_chunks: ChunkHook | None = None,
                 max_new_tokens: int | None = None, stop: Sequence[str] = ()) -> Generation:
        spec, tok = self.spec, self.tokenizer
        limit = max_new_tokens or spec.max_new_tokens
        stops = StopStrings(tok, stop) if stop else None
        was_training = self.model.training
        self.model.eval()
        try:
            ids, mask = left_pad(prompts, tok.pad_token_id, device=self.device)
            state = prefill(self.model, ids, mask, lm_head_fp32=spec.lm_head_fp32)
            chunk = spec.chunk_tokens if between_chunks is not None and spec.chunk_tokens else limit
            while state.n_generated < limit and not bool(state.finished.all()):
                n = min(chunk, limit - state.n_generated)
                state = decode(self.model, state, n, temperature=spec.temperature, eos_id=tok.eos_token_id,
                               pad_id=tok.pad_token_id, version=self.version, generator=self.generator,
                               top_p=spec.top_p, top_k=spec.top_k, lm_head_fp32=spec.lm_head_fp32,
                               stop=stops)
                unfinished = state.n_generated < limit and not bool(state.finished.all())
                if unfinished and between_chunks is not None and between_chunks():
                    state = prefill(self.model, state.prompt_ids, state.prompt_mask, state.tokens, state.logps,
                                    state.versions, state.finished, lm_head_fp32=spec.lm_head_fp32)
        finally:
            self.model.train(was_training)
        return to_generation(state)


def build(spec: EngineSpec, *, model, tokenizer, engine_kwargs: dict, **_) -> TransformersEngine:
    """The registry's entry (``asyncrl.core.registries.ENGINES``); it has no options of its own."""
    if engine_kwargs:
        raise ConfigError("rollout.engine_kwargs", f"the transformers engine takes none, got "
                                                   f"{', '.join(sorted(engine_kwargs))}")
    return TransformersEngine(model, tokenizer, spec)
