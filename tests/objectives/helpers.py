"""Shared builders for the objectives tests."""

from __future__ import annotations

import math

import torch

from asyncrl.objectives import LOSSES, REQUIRED, consistent_prox, loss_param_names

# Values for parameters that have no default, so generic tests can call every loss. A new loss with a
# required parameter must be added here (the generic tests fail with a KeyError naming it otherwise).
REQUIRED_TEST_VALUES = {("opsm", "delta"): 0.1}

# Losses whose filter decision is a statistic over the whole call (documented in their modules).
BATCH_LEVEL = {"m2po", "vaco"}
# Parameters under which those filters never fire, so micro-batching must not matter.
NON_FIRING = {"m2po": {"tau": 1e9}, "vaco": {"delta": 1e9}}
# Losses with a regulariser that has a gradient of its own (independent of the advantage), and the
# parameters that switch it off; properties about the policy-gradient term alone use these.
REGULARIZER_OFF = {"ppo_kl": {"kl_coef": 0.0}}


def default_params(name: str) -> dict:
    """Every required parameter of loss ``name`` filled with a test value."""
    out = {}
    for param, default in loss_param_names(name).items():
        if default is REQUIRED:
            out[param] = REQUIRED_TEST_VALUES[(name, param)]
    return out


def needs_prox(name: str) -> bool:
    """Loss ``name`` is built on π_prox (decoupled): a batch for it always carries prox_logp."""
    return "none" not in consistent_prox(name)


def all_loss_names() -> list[str]:
    return sorted(LOSSES)


def make_batch(seed: int, b: int, t: int, *, spread: float = 0.5, mask_p: float = 0.75,
               token_adv: bool = False, with_prox: bool = True) -> dict:
    """A random batch: logp [b, t] requiring grad, behav/prox near it, advantages, a bool mask,
    integer versions in [-1, 4] and current_version 4."""
    g = torch.Generator().manual_seed(seed)
    logp = -3.0 * torch.rand(b, t, generator=g)
    behav = logp + spread * torch.randn(b, t, generator=g)
    prox = logp + 0.5 * spread * torch.randn(b, t, generator=g)
    adv = torch.randn(b, t, generator=g) if token_adv else torch.randn(b, generator=g)
    mask = torch.rand(b, t, generator=g) < mask_p
    versions = torch.randint(-1, 5, (b, t), generator=g)
    return {
        "logp": logp.requires_grad_(),
        "behav_logp": behav,
        "advantages": adv,
        "loss_mask": mask,
        "prox_logp": prox if with_prox else None,
        "versions": versions,
        "current_version": 4,
    }


def run(name: str, batch: dict, **params):
    """policy_loss on a batch dict; returns (loss, stats, grad of logp)."""
    from asyncrl.objectives import policy_loss

    logp = batch["logp"]
    if logp.grad is not None:
        logp.grad = None
    args = {k: v for k, v in batch.items() if k not in ("logp", "behav_logp", "advantages", "loss_mask")}
    loss, stats = policy_loss(name, logp, batch["behav_logp"], batch["advantages"], batch["loss_mask"],
                              **args, **{**default_params(name), **params})
    (grad,) = torch.autograd.grad(loss, logp, allow_unused=True)
    grad = torch.zeros_like(logp) if grad is None else grad
    return loss, stats, grad


def rows(batch: dict, index) -> dict:
    """The rows ``index`` of every per-sequence tensor of a batch (logp re-leafed)."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, torch.Tensor) and v.dim() >= 1:
            out[k] = v.detach()[index]
        else:
            out[k] = v
    out["logp"] = out["logp"].clone().requires_grad_()
    return out


def lg(x: float) -> float:
    return math.log(x)


def t(rows_: list) -> torch.Tensor:
    """A float32 tensor from nested lists."""
    return torch.tensor(rows_, dtype=torch.float32)


def from_ratios(r: list, base: float = -1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logp requiring grad, behav_logp) with π_θ/π_behav = r elementwise and log π_behav = base."""
    r_t = t(r)
    behav = torch.full_like(r_t, base)
    return (behav + torch.log(r_t)).requires_grad_(), behav


def call(name: str, logp, behav, adv, mask=None, **kwargs):
    """policy_loss with an all-true default mask; returns (loss, stats, grad)."""
    from asyncrl.objectives import policy_loss

    mask = torch.ones(logp.shape, dtype=torch.bool) if mask is None else mask
    loss, stats = policy_loss(name, logp, behav, adv, mask, **kwargs)
    (grad,) = torch.autograd.grad(loss, logp)
    return loss, stats, grad
