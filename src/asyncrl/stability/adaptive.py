"""ESS-governed staleness: spend the generator's head start only while stale data stay useful.

The look-ahead window W (how many batches the generator may run ahead of the trainer; data arrive
about W versions stale when generation outpaces training) moves by one step at a time: down when
the ESS fraction is low, up when it is high, always within [0, K], K = ``async.max_staleness``."""

from __future__ import annotations

import math

from asyncrl.stability.config import AdaptiveStalenessConfig


class AdaptiveWindow:
    def __init__(self, cfg: AdaptiveStalenessConfig, max_staleness: int, window: int):
        if not 0 <= window <= max_staleness:
            raise ValueError(f"window: must be in [0, {max_staleness}], got {window}")
        self.cfg = cfg
        self.max_staleness = max_staleness
        self.window = window

    def update(self, ess_frac: float) -> int:
        """The window for the next admissions, after a step with this ESS fraction."""
        if math.isnan(ess_frac) or ess_frac < self.cfg.lower_below:
            self.window = max(0, self.window - 1)
        elif ess_frac > self.cfg.raise_above:
            self.window = min(self.max_staleness, self.window + 1)
        return self.window
