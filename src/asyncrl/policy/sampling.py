"""Batched autoregressive sampling with a KV cache that records, for every sampled token, its
log-probability under the sampling distribution (the behavior log-prob ``behav_logp``).

With ``top_k`` / ``top_p`` the token is drawn from the truncated, renormalized distribution, but
``behav_logp`` stays the log-prob under the full softmax at the temperature, ``log_softmax(logits /
T)``: the distribution the trainer computes for the same token (as verl and AReaL record it), so the
importance ratio is exactly 1 when the weights have not changed.

The decode loop is written out (rather than ``model.generate``) because the runtime needs three
things ``generate`` does not give exactly: the log-prob of each sampled token as sampled, decoding in
chunks with a weight swap in between, and a re-prefill of the same sequences after the swap.

Only the last position's logits are computed, in the prefill as in each decode step: the model's
``logits_to_keep=1`` where its forward takes it, else a hook that hands the output head the last
position alone, so a prefill of B sequences of L tokens never builds the [B, L, V] logits. With
``lm_head_fp32`` the head's matmul runs in float32 (hidden state and weight cast up, outside any
autocast), as the trainer's does under ``policy.lm_head_fp32``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from asyncrl.types import Generation


def left_pad(seqs: list[list[int]], pad_id: int, device: torch.device | str = "cpu"
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """→ (ids [B, L] long, attention_mask [B, L] long) on ``device``, sequences right-aligned.
    Built on the CPU and moved once (one host-to-device copy, not one per row)."""
    width = max((len(s) for s in seqs), default=1)  # no rows (every group of a unit failed): [0, 1]
    ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        if s:
            ids[i, width - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, width - len(s):] = 1
    return ids.to(device), mask.to(device)


@lru_cache(maxsize=None)
def _cache_field(model_cls: type) -> str:
    """The name of the KV-cache argument and output field: ``cache`` in recent transformers releases,
    ``past_key_values`` before (newer releases still take it, but warn on every process's stderr)."""
    return "cache" if "cache" in inspect.signature(model_cls.forward).parameters else "past_key_values"


def _base_class(model: torch.nn.Module) -> type:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft wrapper
    return type(base)


def cache_field(model: torch.nn.Module) -> str:
    return _cache_field(_base_class(model))


@lru_cache(maxsize=None)
def _keeps_last_logits(model_cls: type) -> bool:
    """Whether the model's forward takes ``logits_to_keep`` (transformers' causal LMs since 4.50)."""
    return "logits_to_keep" in inspect.signature(model_cls.forward).parameters


def _fp32_head(head: torch.nn.Module, hidden: torch.Tensor) -> torch.Tensor:
    """``head``'s linear map of ``hidden`` [..., H] computed in float32 → [..., V] float32; autocast
    is off inside so that it cannot cast the operands back down."""
    bias = getattr(head, "bias", None)
    with torch.autocast(hidden.device.type, enabled=False):
        return F.linear(hidden.float(), head.weight.float(), None if bias is None else bias.float())


@contextmanager
def _head_for_last_logits(model: torch.nn.Module, *, slice_input: bool, fp32: bool) -> Iterator[None]:
    """While open, ``model``'s output head sees only the last position of its input [B, L, H]
    (``slice_input``: for a forward without ``logits_to_keep``) and computes in float32 (``fp32``)."""
    if not (slice_input or fp32):
        yield
        return
    head = model.get_output_embeddings()
    if head is None or (fp32 and not isinstance(getattr(head, "weight", None), torch.Tensor)):
        raise ValueError(f"{_base_class(model).__name__}: no linear output head to compute the last logits with")
    hooks = [head.register_forward_pre_hook(lambda _module, args: (args[0][:, -1:], *args[1:]))] if slice_input else []
    if fp32:
        head.forward = lambda hidden: _fp32_head(head, hidden)  # this instance only, until closed
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()
        if fp32:
            del head.forward


def last_logits(model: PreTrainedModel, *, lm_head_fp32: bool = False, **inputs) -> tuple[torch.Tensor, object]:
    """(logits of the last position [B, V] float32, the KV cache) of ``model(**inputs)`` with the
    output head applied to the last position only (module docstring)."""
    keeps = _keeps_last_logits(_base_class(model))
    with _head_for_last_logits(model, slice_input=not keeps, fp32=lm_head_fp32):
        out = model(**inputs, **({"logits_to_keep": 1} if keeps else {}))
    return out.logits[:, -1].float(), getattr(out, cache_field(model))


def positions(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position ids that skip padding: [B, L] long."""
    return (attention_mask.cumsum(-1) - 1).clamp(min=0)


@dataclass
class DecodeState:
    """Everything needed to continue decoding a batch. Tensors live on the model's device.

    prompt_ids [B, P] long (left-padded), prompt_mask [B, P] long,
    tokens [B, t] long (generated so far, pad after eos), logps [B, t] float32, versions [B, t] long,
    finished [B] bool, next_logits [B, V] float32 (logits for the next token), past: the KV cache.
    """

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    tokens: torch.Tensor
    logps: torch.Tensor
    versions: torch.Tensor
    finished: torch.Tensor
    next_logits: torch.Tensor
    past: object
    attn: torch.Tensor  # [B, P + t] long, attention mask of the cached prefix

    @property
    def n_generated(self) -> int:
        return self.tokens.shape[1]


@torch.no_grad()
def prefill(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
            tokens: torch.Tensor | None = None, logps: torch.Tensor | None = None,
            versions: torch.Tensor | None = None, finished: torch.Tensor | None = None, *,
            lm_head_fp32: bool = False) -> DecodeState:
    """Run the prefix (prompt + any tokens generated so far) through ``model`` and build a state.

    Called at the start, and again after a weight update so that later tokens come exactly from
    the new weights (the old KV cache was computed by the old ones). ``lm_head_fp32``: the output
    head in float32.
    """
    batch = prompt_ids.shape[0]
    device = prompt_ids.device
    if tokens is None:
        tokens = torch.zeros((batch, 0), dtype=torch.long, device=device)
        logps = torch.zeros((batch, 0), dtype=torch.float32, device=device)
        versions = torch.zeros((batch, 0), dtype=torch.long, device=device)
        finished = torch.zeros(batch, dtype=torch.bool, device=device)
    gen_mask = (versions >= 0).long() if tokens.shape[1] else tokens.new_zeros((batch, 0))
    ids = torch.cat([prompt_ids, tokens], dim=1)
    attn = torch.cat([prompt_mask, gen_mask], dim=1)
    next_logits, past = last_logits(model, lm_head_fp32=lm_head_fp32, input_ids=ids, attention_mask=attn,
                                    position_ids=positions(attn), use_cache=True)
    return DecodeState(prompt_ids, prompt_mask, tokens, logps, versions, finished, next_logits, past, attn)


def truncate(logp: torch.Tensor, top_p: float = 1.0, top_k: int = 0) -> torch.Tensor:
    """``logp`` [B, V] with the tokens outside the top-k, then outside the nucleus, set to −inf (not
    renormalized). The nucleus is the smallest set of most likely tokens whose probability,
    renormalized after top-k, reaches ``top_p`` (the first token is always kept). Ties at the k-th
    value are kept, as in transformers' ``TopKLogitsWarper``."""
    if 0 < top_k < logp.shape[-1]:
        kth = logp.topk(top_k, dim=-1).values[:, -1:]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = logp.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        drop = mass_before >= top_p
        drop[:, 0] = False
        logp = logp.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logp


def sample_token(logits: torch.Tensor, *, temperature: float, top_p: float = 1.0, top_k: int = 0,
                 generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(token [B], its behavior log-prob [B]) for next-token ``logits`` [B, V]: sampled from the
    top-k / top-p truncation of ``softmax(logits / T)``, or the argmax at temperature 0; the
    log-prob is under the full, untruncated ``log_softmax(logits / T)`` (module docstring)."""
    logp_all = torch.log_softmax(logits / temperature if temperature > 0 else logits, dim=-1)
    if temperature > 0:
        kept = truncate(logp_all, top_p, top_k) if top_p < 1.0 or top_k > 0 else logp_all
        token = torch.multinomial(kept.exp(), 1, generator=generator).squeeze(1)
    else:
        token = logp_all.argmax(-1)
    return token, logp_all.gather(1, token[:, None]).squeeze(1)


@torch.no_grad()
def decode(model: PreTrainedModel, state: DecodeState, n_tokens: int, *, temperature: float,
           eos_id: int, pad_id: int, version: int = 0, generator: torch.Generator | None = None,
           top_p: float = 1.0, top_k: int = 0, lm_head_fp32: bool = False,
           stop: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> DecodeState:
    """Decode up to ``n_tokens`` more tokens (stops early when every sequence has finished).

    temperature 0 = greedy; ``top_p`` < 1 / ``top_k`` > 0 truncate the sampling distribution
    (:func:`sample_token`). Finished sequences get ``pad_id``, log-prob 0 and version −1.
    ``lm_head_fp32``: the output head in float32. ``stop(tokens [B, t], alive [B]) -> [B] bool``:
    rows that end after the token just sampled (stop strings, :class:`StopStrings`), as at eos.
    """
    cache = cache_field(model)
    for _ in range(n_tokens):
        if bool(state.finished.all()):
            break
        token, token_logp = sample_token(state.next_logits, temperature=temperature, top_p=top_p, top_k=top_k,
                                         generator=generator)
        alive = ~state.finished
        token = torch.where(alive, token, torch.full_like(token, pad_id))
        token_logp = torch.where(alive, token_logp, torch.zeros_like(token_logp))
        token_version = torch.where(alive, torch.full_like(token, version), torch.full_like(token, -1))
        state.tokens = torch.cat([state.tokens, token[:, None]], dim=1)
        state.logps = torch.cat([state.logps, token_logp[:, None]], dim=1)
        state.versions = torch.cat([state.versions, token_version[:, None]], dim=1)
        state.finished = state.finished | (alive & (token == eos_id))
        if stop is not None:
            state.finished = state.finished | (alive & stop(state.tokens, alive))
        state.attn = torch.cat([state.attn, alive.long()[:, None]], dim=1)
        state.next_logits, state.past = last_logits(
            model, lm_head_fp32=lm_head_fp32, input_ids=token[:, None], attention_mask=state.attn,
            position_ids=positions(state.attn)[:, -1:], use_cache=True, **{cache: state.past})
    return state


class StopStrings:
    """Rows whose generated text now contains one of ``stops`` (a turn ends at ``</tool_call>``, at
    a newline...): the stop of :func:`decode`. Only the last tokens of a row are decoded, enough to
    hold the longest stop string (every token decodes to at least one character); a row that
    contained a stop before this token had already finished. The token that completes the string
    is kept (token-in/token-out: what was sampled stays as sampled)."""

    def __init__(self, tokenizer, stops: Sequence[str]):
        self.tokenizer = tokenizer
        self.stops = tuple(s for s in stops if s)
        self.window = max((len(s) for s in self.stops), default=0) + 2

    def __call__(self, tokens: torch.Tensor, alive: torch.Tensor) -> torch.Tensor:
        hit = torch.zeros_like(alive)
        rows = alive.nonzero().squeeze(1).tolist()
        if not rows:
            return hit
        tails = tokens[rows, -self.window:].cpu().tolist()
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=False)
        for row, text in zip(rows, texts):
            if any(stop in text for stop in self.stops):
                hit[row] = True
        return hit


def to_generation(state: DecodeState) -> Generation:
    return Generation(
        prompt_ids=state.prompt_ids.cpu(), prompt_mask=state.prompt_mask.bool().cpu(),
        completion_ids=state.tokens.cpu(), behav_logp=state.logps.cpu(),
        versions=state.versions.cpu(), completion_mask=(state.versions >= 0).cpu(),
    )
