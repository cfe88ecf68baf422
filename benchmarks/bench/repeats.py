"""The speed protocol: repeats of the same cell in interleaved order, and the ratio statistics of
their paired timings (pure functions; the report table is :mod:`benchmarks.bench.speed_report`).

Why: on the shared 2-core machines identical work has timed up to 13 % apart, so one run per arm
cannot tell a 0.97× from a 1.1×. ``--repeats N`` runs every cell N times with the same seed (a
repeat measures timing noise, not seeds), in the order

    repeat 1: arms in order, repeat 2: reversed, repeat 3: in order, ...   (A B | B A | A B ...)

so a drift of the machine's speed over the session (another job starting, thermal throttling)
falls on both arms alike instead of on whichever ran last. Repeat r of arm A and repeat r of arm B
(same seed) are a *pair*; their ratio is one measurement of the speed-up, and the t interval of the
log ratios over the pairs (n − 1 df) is the *paired interval*. Logs, because a ratio and its
inverse must get mirrored intervals (A ÷ B = 1 / (B ÷ A)), which a t interval on the raw ratios
would not give. A figure from fewer than PROTOCOL_REPEATS repeats is marked as such.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np
from scipy.stats import t as _t

from .cells import Cell

PROTOCOL_REPEATS = 5  # the fewest repeats a speed figure may rest on without a mark
CONFIDENCE = 0.95
T = TypeVar("T")


def interleave(arms: Sequence[T], repeats: int) -> list[tuple[T, int]]:
    """(arm, repeat) in run order: odd repeats in arm order, even ones reversed (1-based repeats).
    Two arms over three repeats: A1 B1 B2 A2 A3 B3."""
    if repeats < 1:
        raise ValueError(f"--repeats: must be >= 1, got {repeats}")
    order = []
    for r in range(1, repeats + 1):
        order += [(arm, r) for arm in (arms if r % 2 else list(reversed(arms)))]
    return order


def repeat_cells(cells: Sequence[Cell], repeats: int) -> list[Cell]:
    """One seed's cells, each run ``repeats`` times in interleaved order; repeat r of a cell is named
    ``<cell>-r<r>`` (its own run folder, so a cut-off run resumes at the first unfinished repeat)."""
    return [replace(cell, name=f"{cell.name}-r{r}", repeat=r) for cell, r in interleave(list(cells), repeats)]


def protocol_mark(repeats: int) -> str:
    """"" at or above the protocol; else "(N repeat(s): below the 5-repeat protocol)"."""
    if repeats >= PROTOCOL_REPEATS:
        return ""
    return f"({repeats} repeat{'' if repeats == 1 else 's'}: below the {PROTOCOL_REPEATS}-repeat protocol)"


def speed_ratios(arm: Iterable[Any], baseline: Iterable[Any], higher_is_faster: bool) -> list[float]:
    """Per pair (aligned by position), how many times faster the arm ran than the baseline: arm ÷
    baseline for a rate (samples/s), baseline ÷ arm for a time (train wall, time per step), so that
    > 1 always means the arm was faster. A pair with a missing or non-positive side is dropped."""
    a, b = list(arm), list(baseline)
    if len(a) != len(b):
        raise ValueError(f"speed_ratios: {len(a)} arm values against {len(b)} baseline values; pair them first")
    out = []
    for x, y in zip(a, b):
        x, y = _positive(x), _positive(y)
        if x is not None and y is not None:
            out.append(x / y if higher_is_faster else y / x)
    return out


def _positive(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def ratio_stats(ratios: Sequence[float], *, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """Geometric mean, min, max and the paired t interval (on the log ratios, n − 1 df) of per-pair
    ratios; "n" pairs. One pair: the interval is NaN (no spread to estimate); ratios without spread:
    a zero-width interval at the ratio (the t interval with a zero standard error)."""
    logs = np.log(np.asarray([r for r in ratios if r > 0 and math.isfinite(r)], dtype=float))
    n = int(logs.size)
    out = {"n": n, "ratios": [float(r) for r in np.exp(logs)], "geomean": math.nan, "min": math.nan,
           "max": math.nan, "ci_low": math.nan, "ci_high": math.nan}
    if n == 0:
        return out
    centre = float(logs.mean())
    out.update(geomean=math.exp(centre), min=float(np.exp(logs.min())), max=float(np.exp(logs.max())))
    if n >= 2:
        half = float(_t.ppf((1 + confidence) / 2, n - 1) * logs.std(ddof=1) / math.sqrt(n))
        out.update(ci_low=math.exp(centre - half), ci_high=math.exp(centre + half))
    return out


def share_of_ideal(ratio: float, ideal: float | None) -> float | None:
    """(ratio − 1) / (ideal − 1): the part of the largest possible gain that was realised (1 = all
    of it, 0 = none, < 0 = slower). None where no ideal is defined or it allows no gain (ideal <= 1)."""
    if ideal is None or not math.isfinite(ideal) or ideal <= 1 or not math.isfinite(ratio):
        return None
    return (ratio - 1) / (ideal - 1)
