"""The KL penalty to a frozen reference policy (``trainer.kl_coef``, docs/training.md).

The reference is the policy the run started from (the warm start or ``policy.model_path``), frozen,
on the trainer's device in the trainer's dtype. With LoRA it is the same module with its adapters
switched off (the base weights never train), so no second copy is held.

Per generated token, with log r = log π_ref − log π_θ on tokens sampled from (nearly) π_θ, the
estimators of KL(π_θ ‖ π_ref) are Schulman's

    k1 = −log r              unbiased, can be negative
    k2 = (log r)² / 2        biased, non-negative
    k3 = (r − 1) − log r     unbiased, non-negative, low variance (GRPO; verl's low_var_kl)

and the penalty added to the loss is ``kl_coef`` times their mean over the completion tokens.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from asyncrl.core.registry import Registry
from asyncrl.objectives.numerics import clamp_log_ratio
from asyncrl.policy.logprobs import completion_logprobs
from asyncrl.types import Batch

# estimator name -> log r -> its per-token value
KL_ESTIMATORS: Registry[Callable[[Tensor], Tensor]] = Registry("trainer.kl_estimator", {
    "k1": lambda log_r: -log_r,
    "k2": lambda log_r: 0.5 * log_r.square(),
    "k3": lambda log_r: torch.expm1(log_r) - log_r,
})


def kl_estimate(logp: Tensor, ref_logp: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate [B, T] of KL(π_θ ‖ π_ref) from log-probs [B, T] of the sampled tokens
    (``logp`` keeps its gradient). The log-ratio is clamped to ±20 so exp cannot overflow."""
    log_r = clamp_log_ratio(ref_logp.float() - logp.float())
    return KL_ESTIMATORS.lookup(estimator)(log_r)


def kl_penalty(logp: Tensor, ref_logp: Tensor, mask: Tensor, estimator: str = "k3",
               num_tokens: Tensor | int | None = None) -> Tensor:
    """Mean of :func:`kl_estimate` over the ``mask``ed tokens (a scalar); 0 when the mask is empty.
    ``num_tokens``: the denominator when these rows are a micro-batch of a larger minibatch (its
    count of mask tokens), so that the micro-batches' penalties add up to the minibatch's."""
    per_token = torch.where(mask, kl_estimate(logp, ref_logp, estimator), 0.0)
    count = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, device=per_token.device)
    return per_token.sum() / count.clamp(min=1)


class ReferencePolicy:
    """Log-probs of a batch's completions under the frozen reference (no gradient)."""

    def __init__(self, model: torch.nn.Module, adapters_off: bool = False):
        self.model = model
        self.adapters_off = adapters_off  # LoRA: the trained module itself, adapters disabled
        if not adapters_off:
            model.eval().requires_grad_(False)

    @torch.no_grad()
    def logprobs(self, batch: Batch, *, temperature: float, autocast, logits_chunk: int = 1024,
                 lm_head_fp32: bool = False) -> Tensor:
        """[B, T] float32 log-probs of ``batch``'s completions under the reference, computed as the
        trainer computes its own (``completion_logprobs`` with the same head settings)."""
        switch = self.model.disable_adapter() if self.adapters_off else contextlib.nullcontext()
        with switch, autocast:
            logp, _ = completion_logprobs(self.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                          batch.completion_mask, temperature=temperature,
                                          logits_chunk=logits_chunk, lm_head_fp32=lm_head_fp32,
                                          completion_attn=batch.completion_attention)
        return logp


def build_reference(cfg, model: torch.nn.Module, policy_dir: Path | str) -> ReferencePolicy | None:
    """The reference of ``cfg`` (a Config) for the trained ``model``, loaded from the starting
    weights ``policy_dir``; None when ``trainer.kl_coef`` is 0 (nothing is loaded)."""
    if cfg.trainer.kl_coef == 0:
        return None
    from asyncrl.policy.lora import is_peft_model

    if is_peft_model(model):
        return ReferencePolicy(model, adapters_off=True)
    from asyncrl.policy.model import load_policy_for

    # from the starting weights on resume too (not the checkpoint); RNG-neutral, so a resumed run's
    # random streams stay those of the uninterrupted one
    with torch.random.fork_rng(devices=[]):
        reference, _ = load_policy_for(cfg.policy, policy_dir)
    return ReferencePolicy(reference)
