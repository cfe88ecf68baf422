"""Statistics at the warm-start level, for planned studies whose seeds sit on a few warm starts.

A study with ``warm_starts: W`` starts seed s from warm start s % W. The seeds of one warm start share
its weights, so their rewards are correlated (the intraclass correlation, ICC): 20 seeds on 4 warm
starts are not 20 independent draws of "a warm start and a seed", and a t interval over the 20 seeds
describes these 4 warm starts, not the next one. Three pure functions, secondary to the plan's test:

- :func:`warm_start_ci`: the mean of the warm-start means with a t interval on W − 1 df, which
  generalises to new warm starts;
- :func:`icc`: the share of an endpoint's variance that lies between warm starts (one-way ANOVA);
- :func:`mixed_gap`: the paired gaps d_ij (warm start i, seed j) under the mixed model
  d_ij = μ + u_i + e_ij, warm start a random effect: μ with its t interval, p and TOST p.

Kept apart from stats.py only to keep that file under 500 lines.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from scipy.stats import t as _t

from .stats import CONFIDENCE, _check_confidence, _t_p, as_float

__all__ = ["icc", "mixed_gap", "warm_start_ci", "warm_start_groups"]


def warm_start_groups(values: Iterable[Any], blocks: Iterable[Any]) -> list[np.ndarray]:
    """The finite values of each warm start, warm starts in sorted order (a warm start without a
    finite value is left out). ``values`` and ``blocks`` are aligned by position."""
    values, blocks = list(values), list(blocks)
    if len(values) != len(blocks):
        raise ValueError(f"warm starts: {len(values)} values but {len(blocks)} warm-start ids; align them by seed")
    groups: dict[Any, list[float]] = {}
    for value, block in zip(values, blocks):
        x = as_float(value)
        if math.isfinite(x):
            groups.setdefault(block, []).append(x)
    return [np.array(groups[b]) for b in sorted(groups, key=str)]


def warm_start_ci(values: Iterable[Any], blocks: Iterable[Any], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """{"mean", "ci_low", "ci_high", "n_warm_starts", "n"}: the mean of the warm-start means and its
    t interval on (warm starts − 1) df. Each warm start counts once however many seeds it holds, so an
    unbalanced design is handled as it is (its warm-start means are just less precise); one warm start
    collapses the interval to its mean, none gives NaN."""
    _check_confidence(confidence)
    groups = warm_start_groups(values, blocks)
    means = np.array([g.mean() for g in groups])
    out = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "n_warm_starts": len(groups),
           "n": int(sum(g.size for g in groups))}
    if means.size == 0:
        return out
    mean = float(means.mean())
    half = 0.0 if means.size < 2 else float(_t.ppf((1 + confidence) / 2, means.size - 1)
                                            * means.std(ddof=1) / math.sqrt(means.size))
    out.update(mean=mean, ci_low=mean - half, ci_high=mean + half)
    return out


def _anova(groups: Sequence[np.ndarray]) -> tuple[float, float, float, float]:
    """(grand mean, MS between, MS within, n0) of a one-way layout; MS within is NaN when no warm start
    holds two values. n0 = (N − Σ n_i² / N) / (W − 1) is the per-group size that makes E[MS between] =
    σ_e² + n0 σ_u² in an unbalanced layout; it is n when every group holds n."""
    sizes = np.array([g.size for g in groups], dtype=float)
    total, n_groups = sizes.sum(), len(groups)
    grand = float(np.concatenate(groups).mean())
    ss_between = float(sum(g.size * (g.mean() - grand) ** 2 for g in groups))
    ss_within = float(sum(((g - g.mean()) ** 2).sum() for g in groups))
    ms_within = ss_within / (total - n_groups) if total > n_groups else math.nan
    n0 = (total - (sizes ** 2).sum() / total) / (n_groups - 1)
    return grand, ss_between / (n_groups - 1), ms_within, float(n0)


def icc(values: Iterable[Any], blocks: Iterable[Any]) -> float:
    """The intraclass correlation of ``values`` over warm starts, ICC(1) = σ_u² / (σ_u² + σ_e²) with the
    one-way ANOVA estimates σ_e² = MS within and σ_u² = (MS between − MS within) / n0 (n0: _anova, so
    an unbalanced layout is handled), σ_u² floored at 0 as REML does (a negative variance means "no
    between spread detected", not a negative share). NaN with fewer than two warm starts, without two
    values in any warm start (between and within cannot be told apart), or without any spread."""
    groups = warm_start_groups(values, blocks)
    if len(groups) < 2:
        return math.nan
    _, ms_between, ms_within, n0 = _anova(groups)
    if not math.isfinite(ms_within):
        return math.nan
    between = max(0.0, (ms_between - ms_within) / n0)
    return between / (between + ms_within) if between + ms_within > 0 else math.nan


def mixed_gap(gaps: Iterable[Any], blocks: Iterable[Any], margin: float | None = None, *,
              confidence: float = CONFIDENCE) -> dict[str, Any]:
    """The paired gaps d_ij (warm start i of W, seed j of n; ``blocks`` gives each gap's warm start) under
    the mixed model d_ij = μ + u_i + e_ij, u_i ~ N(0, σ_u²), e_ij ~ N(0, σ_e²): {"mean" (μ̂), "ci_low",
    "ci_high", "se", "df", "p" (two-sided, H0: μ = 0), "p_tost" (within ±``margin``; NaN without one),
    "sd_between" (σ̂_u), "sd_within" (σ̂_e), both REML's, "boundary" (REML puts σ̂_u² at 0: see below),
    "n_warm_starts", "n", "margin", "test": "mixed"}.

    Balanced designs only: ValueError (one line) when the warm starts hold different numbers of gaps,
    since REML then has no closed form and the df would need Kenward-Roger, which this does not fit.

    Why this is the REML fit: with n gaps in each warm start, the sums of squares between warm starts
    (SSB) and within them (SSW) are independent, SSB / (σ_e² + n σ_u²) ~ χ²(W − 1) and SSW / σ_e² ~
    χ²(N − W) (N = W n), and the restricted likelihood is the product of these two densities. Its
    maximum is σ_e² + n σ_u² = MSB and σ_e² = MSW, the ANOVA estimates. The GLS estimate of μ is the
    grand mean whatever the variances (every warm start weighs the same), and its variance
    (σ_u² + σ_e² / n) / W = (σ_e² + n σ_u²) / N is estimated by MSB / N: SE = sqrt(MSB / N), t on the
    W − 1 df of MSB. That t is exact for every σ_u² >= 0, because MSB / (σ_e² + n σ_u²) is
    χ²(W − 1) / (W − 1) and independent of the grand mean: it is the t test of the W warm-start means.

    When MSB < MSW, REML's maximum lies on the boundary σ_u² = 0, where σ̂_e² is the pooled
    (SSB + SSW) / (N − 1) (reported as "sd_within") and the plug-in SE would be the paired t's. Our
    choice: keep SE = sqrt(MSB / N) on W − 1 df there too ("boundary": true, σ̂_u = 0), since that test
    stays exact; the pooled variance on W − 1 df would be conservative for no reason, and on N − 1 df it
    would assume σ_u² = 0 exactly, which is the paired t already beside it. With one gap per warm start
    σ_u and σ_e cannot be told apart (NaN) and the test is the paired t. No spread at all gives no test
    (p NaN), as in paired()."""
    _check_confidence(confidence)
    groups = warm_start_groups(gaps, blocks)
    sizes = sorted({g.size for g in groups})
    if len(sizes) > 1:
        raise ValueError(f"mixed model: unbalanced warm starts ({', '.join(str(g.size) for g in groups)} gaps); "
                         f"the closed-form REML needs as many gaps in each")
    n_warm, total = len(groups), int(sum(g.size for g in groups))
    out = {"mean": math.nan, "ci_low": math.nan, "ci_high": math.nan, "se": math.nan, "df": math.nan,
           "p": math.nan, "p_tost": math.nan, "sd_between": math.nan, "sd_within": math.nan, "boundary": False,
           "n_warm_starts": n_warm, "n": total, "margin": margin, "test": "mixed"}
    if total == 0:
        return out
    grand = float(np.concatenate(groups).mean())
    out.update(mean=grand, ci_low=grand, ci_high=grand)
    if n_warm < 2:
        return out
    _, ms_between, ms_within, n = _anova(groups)
    se, df = math.sqrt(ms_between / total), float(n_warm - 1)
    if math.isfinite(ms_within):  # REML's variance components: on the boundary, σ_u = 0 and σ_e² the pooled
        boundary = ms_between < ms_within
        within = float(np.concatenate(groups).var(ddof=1)) if boundary else ms_within
        out.update(sd_between=0.0 if boundary else math.sqrt((ms_between - ms_within) / n),
                   sd_within=math.sqrt(within), boundary=bool(boundary))
    out.update(se=se, df=df)
    if se > 0:
        half = float(_t.ppf((1 + confidence) / 2, df)) * se
        out.update(ci_low=grand - half, ci_high=grand + half, p=float(_t_p(grand, se, df, 0.0, "two-sided")))
        if margin is not None:
            if not margin > 0:
                raise ValueError(f"margin: must be > 0, got {margin}")
            out["p_tost"] = float(max(_t_p(grand, se, df, -margin, "greater"), _t_p(grand, se, df, margin, "less")))
    return out
