"""``loglinear_ess``: A-3PO with an α floor chosen per minibatch from the ESS of its behavior weights.

A-3PO's behavior weight is w_t = ρ_t^(1−α_t), ρ = π_θ/π_behav, α_t = 1/d_t (a3po.py). For a floor
a, α_t(a) = max(α_t, a) and w_t(a) = ρ_t^(1−α_t(a)); over the minibatch's valid tokens V (generated,
v_t >= 0, finite ρ_t) the effective-sample-size fraction is

    ESS(a) = (Σ_V w_t(a))² / (|V| Σ_V w_t(a)²)   in [1/|V|, 1],   ESS(1) = 1 (every w = 1).

The floor is a* = a_0 = min_V α_t (= 1/d_max: plain A-3PO) when ESS(a_0) >= ``ess_target``, else
the result of ``iterations`` bisection steps on [a_0, 1] keeping the invariant ESS(hi) >= target,
ESS(lo) < target, returning hi: an a* with ESS(a*) >= target within (1 − a_0)/2^iterations of a
crossing (the smallest a with that ESS when ESS rises with a, as it does unless the ρ of differently
stale tokens pull against each other). Then log π_prox = α(a*) ℓ_b + (1 − α(a*)) sg(ℓ).

The floor is set from the current log-probs, which a strategy first sees per minibatch (``plan`` has
only π_behav), so it is a statistic of each minibatch (of the batch when there is one minibatch), and
there is no forward pass: the bisection is ~5 element-wise ops per step on [b, T], no device sync.
A token's π_prox is detached and depends on the other tokens of its minibatch through a* only.
"""

from __future__ import annotations

import torch
from torch import Tensor

from asyncrl.objectives.numerics import LOG_RATIO_BOUND
from asyncrl.objectives.params import check_real
from asyncrl.objectives.prox.base import ProxStrategy
from asyncrl.objectives.a3po import staleness_alpha


def _ess_frac(log_rho: Tensor, alpha: Tensor, floor: Tensor, valid_f: Tensor, n: Tensor) -> Tensor:
    """ESS fraction of w = ρ^(1 − max(α, floor)) over the valid tokens; all inputs [b, T] but floor
    (0-dim) and n (0-dim, the valid count, >= 1). Normalised by the largest log-weight (scale-free)."""
    log_w = (1.0 - torch.maximum(alpha, floor)) * log_rho
    # |log_w| <= 20, so after the shift every valid log_w is >= −40: w and w² stay normal float32
    log_w = log_w - (log_w * valid_f).amax()
    w = torch.exp(log_w) * valid_f
    return w.sum() ** 2 / (n * (w * w).sum()).clamp(min=1e-30)


@torch.no_grad()
def ess_alpha_floor(log_rho: Tensor, alpha: Tensor, valid: Tensor, ess_target: float, iterations: int = 20) -> Tensor:
    """The floor a* of the module docstring, a 0-dim float32 tensor (1 when no token is valid).

    log_rho: [b, T] float log π_θ − log π_behav (finite where ``valid``); alpha: [b, T] float32 A-3PO
    weights; valid: [b, T] bool.
    """
    valid_f = valid.float()
    n = valid_f.sum().clamp(min=1.0)
    log_rho = torch.where(valid, log_rho, 0.0).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    start = torch.where(valid, alpha, 1.0).amin()
    lo, hi = start, torch.ones_like(start)
    start_ok = _ess_frac(log_rho, alpha, start, valid_f, n) >= ess_target
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        ok = _ess_frac(log_rho, alpha, mid, valid_f, n) >= ess_target
        hi = torch.where(ok, mid, hi)
        lo = torch.where(ok, lo, mid)
    return torch.where(start_ok, start, hi)


class LogLinearESS(ProxStrategy):
    """``loglinear_ess``: ``ess_target`` in (0, 1] (the ESS fraction the behavior weights keep, 0.5),
    ``iterations`` >= 1 bisection steps (20: a* to within 1e-6)."""

    minibatch_statistic = True  # the floor is a statistic of the whole minibatch: not split into micro-batches

    def __init__(self, ess_target: float = 0.5, iterations: int = 20) -> None:
        check_real("ess_target", ess_target, low=0.0, high=1.0, low_open=True)
        check_real("iterations", iterations, low=1.0)
        self.ess_target = float(ess_target)
        self.iterations = int(iterations)

    def step_rows(self, behav_logp, versions, current_version, exact_logp):
        return (staleness_alpha(versions, current_version),)

    def minibatch(self, rows, behav_logp, logp, versions, current_version):
        (alpha,) = rows
        behav = behav_logp.detach().float()
        current = logp.detach().float()
        log_rho = current - behav
        valid = (versions >= 0) & torch.isfinite(log_rho)
        floor = ess_alpha_floor(log_rho, alpha, valid, self.ess_target, self.iterations)
        alpha = torch.maximum(alpha, floor)
        return torch.addcmul(alpha * behav, 1.0 - alpha, current)
