"""ESS early warning: in async RL the effective sample size of the importance weights falls before
the reward does, so a run whose ESS stays low for a few steps is flagged while it can still be saved.
"""

from __future__ import annotations

import math

from asyncrl.stability.config import EssWarningConfig


class EssMonitor:
    """Feed it each step's ESS fraction; it says when the warning fires (and what to do)."""

    def __init__(self, cfg: EssWarningConfig):
        self.cfg = cfg
        self.below = 0  # consecutive steps below the threshold
        self.warnings: list[int] = []  # steps at which the warning fired

    @property
    def enabled(self) -> bool:
        return self.cfg.threshold > 0

    def update(self, step: int, ess_frac: float) -> str | None:
        """The action to take after ``step`` (``warn`` / ``stop`` / ``rollback``), or None. A NaN
        ESS (no valid token) counts as low. Fires once per run of low steps, at its ``window``-th."""
        if not self.enabled:
            return None
        low = math.isnan(ess_frac) or ess_frac < self.cfg.threshold
        self.below = self.below + 1 if low else 0
        if self.below != self.cfg.window:
            return None
        self.warnings.append(step)
        return self.cfg.action

    def first_low_step(self, step: int) -> int:
        """The first step of the low run that fired at ``step``."""
        return step - self.cfg.window + 1

    def summary(self) -> dict:
        return {"ess_warnings": len(self.warnings), "ess_warning_steps": list(self.warnings)}

    def state_dict(self) -> dict:
        return {"below": self.below, "warnings": list(self.warnings)}

    def load_state_dict(self, state: dict) -> None:
        self.below, self.warnings = int(state["below"]), [int(s) for s in state["warnings"]]
