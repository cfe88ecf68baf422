"""ESS-governed staleness: spend the generator's head start only where it buys throughput and the
stale data stay useful.

The look-ahead window W (how many batches the generator may run ahead of the trainer; data arrive
about W versions stale when generation outpaces training) moves by one at a time, within [0, K],
K = ``async.max_staleness``:

* the ESS fraction fell below ``lower_below``: W − 1 (down to 0), the data are too stale;
* the trainer waited for its batch (longer than ``starved_frac`` of its step) and the ESS fraction
  is above ``raise_above``: W + 1, more look-ahead would keep it fed;
* the trainer did not wait: W − 1, down to ``min_window``, since staleness that buys no throughput
  only costs learning signal;
* otherwise W stays.

So W settles at the smallest look-ahead that keeps the trainer fed, unless the ESS says the data at
that staleness are no longer worth it."""

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

    def update(self, ess_frac: float, wait_frac: float) -> int:
        """The window for the next admissions, after a step with this ESS fraction in which the
        trainer spent ``wait_frac`` of the step waiting for its batch."""
        floor = min(self.cfg.min_window, self.max_staleness)
        if math.isnan(ess_frac) or ess_frac < self.cfg.lower_below:
            self.window = max(0, self.window - 1)
        elif wait_frac > self.cfg.starved_frac:
            if ess_frac > self.cfg.raise_above:
                self.window = min(self.max_staleness, self.window + 1)
        elif self.window > floor:
            self.window -= 1
        return self.window
