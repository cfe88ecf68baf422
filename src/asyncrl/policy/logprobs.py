"""Per-token log-probs and entropy of completions under a model (trainer side)."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from asyncrl.policy.sampling import positions


def completion_logprobs(model: PreTrainedModel, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor,
                        completion_ids: torch.Tensor, completion_mask: torch.Tensor, *,
                        temperature: float = 1.0, with_entropy: bool = False
                        ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each completion token given everything before it.

    prompt_ids [B, P] long (left-padded), prompt_mask [B, P] bool/long, completion_ids [B, T] long,
    completion_mask [B, T] bool. Returns logp [B, T] float32 (0 where the mask is False) and, if
    asked, entropy [B, T] float32 of the full next-token distribution. Logits are divided by
    ``temperature`` so the result is comparable to the behavior log-probs recorded at sampling.
    Differentiable when called with grad enabled. Every tensor must be on the model's device
    (callers move a batch once, with ``Batch.to``).
    """
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    n = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions(attn)).logits
    # logits at position j predict token j + 1: the completion is predicted by the n positions
    # ending one before the last.
    logits = logits[:, -n - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    mask = completion_mask
    logp = logp_all.gather(-1, completion_ids[..., None]).squeeze(-1)
    logp = torch.where(mask, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.where(mask, entropy, torch.zeros_like(entropy))
    return logp, entropy
