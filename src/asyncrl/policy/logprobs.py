"""Per-token log-probs and entropy of completions under a model (trainer side), bounded in memory.

The log-prob of one token needs the log-softmax over the whole vocabulary at its position: with a
Qwen vocabulary (V = 151,936) the fp32 logits of a 16 × 1024 batch alone are 10 GB, and autograd
would keep several such tensors. So, where the model's output layer is a plain linear head after a
backbone (``separable_head``), only the backbone runs over the sequence; its hidden states are taken
at the completion tokens that count (``completion_mask``), and the head and the log-softmax run over
``logits_chunk`` token positions at a time, forward and backward (the backward recomputes a chunk's
logits instead of keeping them). Peak memory of the head is then a few ``logits_chunk × V`` fp32
buffers, whatever the batch. Any other model takes the full-logits path (``full_logits_logprobs``).

Both paths compute the same thing: ``log_softmax(logits.float() / temperature)`` at the token, the
head's matmul in the autocast dtype when autocast is on (as ``torch.autocast`` would run it) or in
fp32 with ``lm_head_fp32``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable
from transformers import PreTrainedModel

from asyncrl.policy.sampling import positions

# model types whose causal-LM forward is ``lm_head(backbone(...).last_hidden_state)`` and nothing
# else (checked against their transformers sources); others take the full-logits path
SEPARABLE_MODEL_TYPES = frozenset({"qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "llama", "mistral", "phi3", "gpt2"})
# config attributes of a transform applied to the logits after the head (softcapping, scaling)
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


def completion_logprobs(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                        temperature: float = 1.0, with_entropy: bool = False, logits_chunk: int = 1024,
                        lm_head_fp32: bool = False, entropy_grad: bool = False,
                        completion_attn: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each completion token given everything before it.

    prompt_ids [B, P] long (left-padded), prompt_mask [B, P] bool/long, completion_ids [B, T] long,
    completion_mask [B, T] bool. Returns logp [B, T] float32 (0 where the mask is False) and, if
    asked, entropy [B, T] float32 of the full next-token distribution (0 where the mask is False;
    without a gradient unless ``entropy_grad``). Logits are divided by ``temperature`` so the result
    is comparable to the behavior log-probs recorded at sampling. Differentiable when called with
    grad enabled. ``logits_chunk``: token positions per head chunk (memory ∝ logits_chunk × V).
    ``lm_head_fp32``: the head's matmul in fp32 even under autocast. ``completion_attn`` [B, T] bool:
    the completion tokens attended to when they differ from those scored (a multi-turn episode's
    observations are attended to, never scored: ``Batch.completion_attention``); None = the mask.
    Every tensor must be on the model's device (callers move a batch once, with ``Batch.to``).
    """
    if logits_chunk < 1:
        raise ValueError(f"logits_chunk: must be >= 1, got {logits_chunk}")
    parts = separable_head(model)
    if parts is None:
        return full_logits_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                    temperature=temperature, with_entropy=with_entropy,
                                    lm_head_fp32=lm_head_fp32, entropy_grad=entropy_grad,
                                    completion_attn=completion_attn)
    backbone, head = parts
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attended = completion_mask if completion_attn is None else completion_attn
    attn = torch.cat([prompt_mask.long(), attended.long()], dim=1)
    n = completion_ids.shape[1]
    hidden = backbone(input_ids=ids, attention_mask=attn, position_ids=positions(attn),
                      use_cache=False).last_hidden_state
    # hidden state j predicts token j + 1: the completion is predicted by the n positions ending one
    # before the last; only the tokens of the mask go through the head (one host sync, for their count)
    kept = completion_mask.reshape(-1).nonzero().squeeze(1)  # [N] flat indices into [B * T]
    kept_hidden = hidden[:, -n - 1:-1].reshape(-1, hidden.shape[-1]).index_select(0, kept)  # [N, H]
    spec = HeadSpec(temperature=temperature, chunk=logits_chunk,
                    dtype=head_dtype(head.weight, lm_head_fp32), with_entropy=with_entropy,
                    entropy_grad=with_entropy and entropy_grad)
    logp_kept, entropy_kept = ChunkedHeadLogprobs.apply(kept_hidden, head.weight, head.bias,
                                                        completion_ids.reshape(-1).index_select(0, kept), spec)
    shape = completion_mask.shape
    logp = logp_kept.new_zeros(shape.numel()).index_copy(0, kept, logp_kept).view(shape)
    entropy = None
    if with_entropy:
        entropy = entropy_kept.new_zeros(shape.numel()).index_copy(0, kept, entropy_kept).view(shape)
    return logp, entropy


def separable_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Linear] | None:
    """(backbone, head) when ``model`` (or the model inside a peft wrapper) computes its logits as
    ``head(backbone(...).last_hidden_state)`` with a plain ``nn.Linear`` head; None otherwise (an
    unlisted architecture, a transform of the logits, a head wrapped by LoRA or ``modules_to_save``)."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(inner, "config", None)
    if getattr(config, "model_type", None) not in SEPARABLE_MODEL_TYPES:
        return None
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    head = inner.get_output_embeddings()
    backbone = getattr(inner, "base_model", None)
    if type(head) is not torch.nn.Linear or backbone is None or backbone is inner:
        return None
    return backbone, head


def head_dtype(weight: torch.Tensor, fp32: bool) -> torch.dtype:
    """The dtype the head's matmul runs in: fp32 when asked, else the autocast dtype where autocast
    is on for the weight's device and would cast it, else the weight's own."""
    if fp32:
        return torch.float32
    device_type = weight.device.type
    if weight.dtype == torch.float32 and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return weight.dtype


@dataclass(frozen=True)
class HeadSpec:
    """How ``ChunkedHeadLogprobs`` runs: logits / temperature, ``chunk`` token positions at a time,
    the matmul in ``dtype``; entropy too when ``with_entropy``, differentiable when ``entropy_grad``."""

    temperature: float
    chunk: int
    dtype: torch.dtype
    with_entropy: bool
    entropy_grad: bool


def _cast_head(weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype):
    return weight.to(dtype), None if bias is None else bias.to(dtype)


def _chunk_log_softmax(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
                       spec: HeadSpec) -> torch.Tensor:
    """log_softmax(head(hidden).float() / temperature): [c, V] float32 for hidden [c, H]; weight and
    bias already in ``spec.dtype``."""
    with torch.autocast(hidden.device.type, enabled=False):
        logits = F.linear(hidden.to(spec.dtype), weight, bias).float()
    if spec.temperature != 1.0:  # x / 1 == x exactly; in place: ``logits`` is this call's own buffer
        logits.div_(spec.temperature)
    return torch.log_softmax(logits, dim=-1)


class ChunkedHeadLogprobs(torch.autograd.Function):
    """Log-prob of ``targets`` [N] and entropy under ``head(hidden)`` for hidden [N, H], weight
    [V, H], bias [V] or None, ``logits_chunk`` rows at a time. Returns (logp [N], entropy [N] or
    [0]) float32. Saves only its inputs: the backward recomputes each chunk's log-softmax."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, spec: HeadSpec):
        n = hidden.shape[0]
        logp = hidden.new_empty(n, dtype=torch.float32)
        entropy = hidden.new_empty(n if spec.with_entropy else 0, dtype=torch.float32)
        weight_c, bias_c = _cast_head(weight, bias, spec.dtype)
        with torch.no_grad():
            for lo in range(0, n, spec.chunk):
                hi = min(lo + spec.chunk, n)
                logp_all = _chunk_log_softmax(hidden[lo:hi], weight_c, bias_c, spec)
                logp[lo:hi] = logp_all.gather(1, targets[lo:hi, None]).squeeze(1)
                if spec.with_entropy:
                    entropy[lo:hi] = -(logp_all.exp().mul_(logp_all)).sum(-1)
        ctx.spec = spec
        ctx.save_for_backward(hidden, weight, bias, targets, entropy)
        if not spec.entropy_grad:
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        hidden, weight, bias, targets, entropy = ctx.saved_tensors
        spec = ctx.spec
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        weight_c, bias_c = _cast_head(weight, bias, spec.dtype)
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        grad_bias = torch.zeros(bias.shape, dtype=torch.float32, device=bias.device) if need_bias else None
        with_entropy_grad = spec.entropy_grad and grad_entropy is not None
        for lo in range(0, hidden.shape[0], spec.chunk):
            hi = min(lo + spec.chunk, hidden.shape[0])
            logp_all = _chunk_log_softmax(hidden[lo:hi], weight_c, bias_c, spec)
            g = grad_logp[lo:hi, None]
            # d logp_y / dz = onehot_y − p;   d entropy / dz = −p (log p + entropy)
            probs = logp_all.exp()
            if with_entropy_grad:
                logp_all.add_(entropy[lo:hi, None]).mul_(grad_entropy[lo:hi, None]).add_(g)
                grad_z = probs.mul_(logp_all).neg_()
            else:
                grad_z = probs.mul_(-g)
            del logp_all
            grad_z.scatter_add_(1, targets[lo:hi, None], g)
            if spec.temperature != 1.0:
                grad_z.div_(spec.temperature)
            grad_logits = grad_z.to(spec.dtype)
            if need_hidden:
                grad_hidden[lo:hi] = (grad_logits @ weight_c).to(hidden.dtype)
            if need_weight:
                grad_weight += (grad_logits.t() @ hidden[lo:hi].to(spec.dtype)).float()
            if need_bias:
                grad_bias += grad_logits.float().sum(0)
        grad_weight = None if grad_weight is None else grad_weight.to(weight.dtype)
        grad_bias = None if grad_bias is None else grad_bias.to(bias.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None


def full_logits_logprobs(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                         completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                         temperature: float = 1.0, with_entropy: bool = False, lm_head_fp32: bool = False,
                         entropy_grad: bool = False, completion_attn: torch.Tensor | None = None
                         ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`completion_logprobs` through the model's own forward: logits [B, P + T, V] at once.
    For architectures without a separable head; ``lm_head_fp32`` then has no effect (the head is
    inside the model's forward). Shapes and results as :func:`completion_logprobs`."""
    del lm_head_fp32
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attended = completion_mask if completion_attn is None else completion_attn
    attn = torch.cat([prompt_mask.long(), attended.long()], dim=1)
    n = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions(attn), use_cache=False).logits
    logits = logits[:, -n - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    mask = completion_mask.bool()
    logp = logp_all.gather(-1, completion_ids[..., None]).squeeze(-1)
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
    return logp, entropy
