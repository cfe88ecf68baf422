"""Approximate proximal log-probs without a recompute forward pass (A-3PO, docs/objectives.md).

Version convention: ``current_version`` V is the version of the trainer weights at the start of the
step; ``versions`` v_t is the version that produced token t (−1 for prompt / non-generated tokens).
Staleness d_t = V − v_t; the weight on the behavior policy is

    α_t = 1/d_t if d_t >= 1,   α_t = 1 if d_t <= 0 or v_t < 0,

so on-policy (d = 0) and one-step-stale (d = 1) data give π_prox = π_behav exactly: plain PPO against
the behavior policy (A-3PO's text and AReaL's code; the paper's Listing 1 would give π_θ at d = 0,
which silently removes the trust region). d < 0 (a future version: a bug or clock skew) is treated as
d = 0 and counted by ``staleness_stats``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asyncrl.objectives.numerics import Reducer

PROX_METHODS = ("loglinear", "linear", "behav")


def staleness_alpha(versions: Tensor, current_version: int | Tensor) -> Tensor:
    """[B, T] float32 weight α_t on the behavior policy (see the module docstring).

    versions: [B, T] integer. current_version: int or 0-dim integer tensor.
    """
    d = current_version - versions.long()
    alpha = 1.0 / d.clamp(min=1).float()
    return torch.where(versions < 0, 1.0, alpha)


@torch.no_grad()
def approximate_prox_logp(
    method: str,
    behav_logp: Tensor,
    logp: Tensor,
    versions: Tensor,
    current_version: int | Tensor,
) -> Tensor:
    """Approximate log π_prox per token from the behavior and current log-probs and the staleness.

    method:
      "loglinear" (A-3PO): ℓ_p = α ℓ_b + (1 − α) sg(ℓ), computed as ℓ_b + (1 − α)(ℓ − ℓ_b), which
          makes the trust-region ratio r = π_θ/π_prox = ρ^α and the behavior weight w = ρ^(1−α).
      "linear": mixture in probability space with the same weights, p_prox = α p_b + (1 − α) p_θ,
          i.e. log((1 − β) p_b + β p_θ) with β = 1 − α, evaluated with logaddexp (no exp overflow).
      "behav": ℓ_p = ℓ_b (coupled PPO).
    behav_logp, logp: [B, T] float (any float dtype; upcast to float32 before mixing).
    versions: [B, T] integer; current_version: int.
    Returns [B, T] float32, detached. Where α = 1 the result is exactly ℓ_b whatever ℓ holds; elsewhere a
    non-finite input gives a non-finite output, which the losses exclude from their valid mask.
    """
    if method not in PROX_METHODS:
        raise ValueError(f"method={method!r}: must be one of {', '.join(map(repr, PROX_METHODS))}")
    if behav_logp.shape != logp.shape or versions.shape != logp.shape:
        raise ValueError(
            f"behav_logp, logp, versions: expected equal [B, T] shapes, got {tuple(behav_logp.shape)}, "
            f"{tuple(logp.shape)}, {tuple(versions.shape)}"
        )
    if versions.is_floating_point() or versions.dtype == torch.bool:
        raise ValueError(f"versions: expected an integer tensor, got {versions.dtype}")
    behav = behav_logp.detach().float()
    if method == "behav":
        return behav.clone()
    cur = logp.detach().float()
    alpha = staleness_alpha(versions, current_version)
    if method == "loglinear":  # the reference form; the trainer's hot path is loglinear_plan + apply_loglinear
        return torch.where(alpha == 1.0, behav, torch.addcmul(behav, 1.0 - alpha, cur - behav))
    # "linear": α < 1 wherever the mixture is selected, so both logs are finite there.
    mixed = torch.logaddexp(behav + torch.log(alpha), cur + torch.log1p(-alpha))
    return torch.where(alpha == 1.0, behav, mixed)


def loglinear_plan(behav_logp: Tensor, versions: Tensor, current_version: int | Tensor) -> tuple[Tensor, Tensor]:
    """The step-constant part of the A-3PO proximal policy: ``(base, weights)``, both [B, T] float32,
    with base = α ℓ_b and weights = 1 − α, so that log π_prox = base + weights · sg(ℓ).

    Versions and behavior log-probs are fixed for a training step, so a trainer computes this once per
    step (rows in minibatch order, so each minibatch takes a view) and pays one fused multiply-add per
    minibatch (:func:`apply_loglinear`): the point of A-3PO is that the proximal policy costs nothing
    next to a forward pass, so this path is written for few kernel launches (in-place where possible).
    behav_logp: [B, T] float (no grad); versions: [B, T] integer; current_version: int.

    Positions with v < 0 (not generated: padding after EOS) are outside every loss mask, so this path
    leaves them finite but does not special-case them (the reference form in
    :func:`approximate_prox_logp` returns exactly ℓ_b there); every generated token gets exactly
    the A-3PO value, and exactly ℓ_b where d ≤ 1.
    """
    alpha = (current_version - versions).clamp_(min=1).reciprocal()  # integer → float32
    return alpha * behav_logp.detach(), 1.0 - alpha


def apply_loglinear(base: Tensor, logp: Tensor, weights: Tensor) -> Tensor:
    """log π_prox = base + weights · sg(ℓ) for rows of a :func:`loglinear_plan` (one fused op).

    base, weights: [B, T] float32 from loglinear_plan (rows selected for the minibatch); logp: [B, T].
    Returns [B, T] float32, detached. Where α = 1 (weight 0) and ℓ is finite this is exactly ℓ_b. A
    non-finite ℓ gives a non-finite result; such tokens are already outside every loss's valid mask
    (their ℓ is non-finite), so the reference form's ``where`` guard is not needed on this path.
    """
    return torch.addcmul(base, weights, logp.detach().float())


@torch.no_grad()
def staleness_stats(versions: Tensor, current_version: int | Tensor, mask: Tensor) -> dict[str, Tensor]:
    """Staleness d = V − v over mask tokens with v >= 0: mean, min, max, and the number of tokens with
    d < 0 (``future_version_tokens``; treated as on-policy by ``staleness_alpha``). NaN when empty.

    versions: [B, T] integer; mask: [B, T] bool.
    """
    gen = mask & (versions >= 0)
    d = (current_version - versions).float()
    on_gen = Reducer(gen)
    return {
        "staleness_mean": on_gen.mean(d),
        "staleness_min": on_gen.min(d),
        "staleness_max": on_gen.max(d),
        "future_version_tokens": (gen & (d < 0)).sum().float(),
    }
