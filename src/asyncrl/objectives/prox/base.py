"""What a proximal strategy is: the interface the trainer calls (docs/objectives.md).

A training step of several minibatch updates needs, per minibatch, log π_prox: the policy the
trust region is centred on, fixed for the whole step. A strategy says how it is obtained, in two
parts: ``plan`` once per step (whatever is constant for the step: the exact log-probs of a
forward pass, or the staleness weights) and ``minibatch`` once per update (the rows of the plan,
plus the minibatch's current log-probs). The caller never looks at a strategy's name, only at
what it declares:

- ``gives_prox``: False for the coupled strategy ``none`` (the loss gets ``prox_logp=None`` and
  anchors at π_behav);
- ``needs_forward``: True when ``plan`` reads ``exact_logp``, the log-probs of the trained weights
  at the start of the step (one extra no-grad forward pass, which the caller runs).

A strategy that gives π_prox without that pass is an approximation (``approximate``), whose error
against the exact log-probs a caller may measure.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor


class ProxStrategy:
    """One way of obtaining log π_prox. Subclasses set the flags and override ``minibatch`` (and
    ``step_rows`` when something is constant for the step)."""

    gives_prox: bool = True
    needs_forward: bool = False

    @property
    def approximate(self) -> bool:
        """Gives π_prox without the exact forward pass."""
        return self.gives_prox and not self.needs_forward

    def plan(self, behav_logp: Tensor, versions: Tensor, current_version: int | Tensor,
             exact_logp: Tensor | None = None) -> ProxPlan:
        """The step's plan. behav_logp, versions (integer), exact_logp: [B, T], rows in minibatch
        order; current_version: the version of the trained weights at the start of the step."""
        return ProxPlan(self, self.step_rows(behav_logp, versions, current_version, exact_logp), current_version)

    def step_rows(self, behav_logp: Tensor, versions: Tensor, current_version: int | Tensor,
                  exact_logp: Tensor | None) -> tuple[Tensor, ...]:
        """[B, T] tensors constant for the step, computed once; each minibatch takes its rows."""
        return ()

    def minibatch(self, rows: tuple[Tensor, ...], behav_logp: Tensor, logp: Tensor, versions: Tensor,
                  current_version: int | Tensor) -> Tensor | None:
        """log π_prox [b, T] (detached) of one minibatch, or None (coupled). rows: this minibatch's
        rows of ``step_rows``; behav_logp, logp (current, may carry a gradient), versions: [b, T]."""
        raise NotImplementedError


@dataclass(frozen=True)
class ProxPlan:
    """A strategy's step-constant part; ``minibatch`` gives log π_prox of rows [start, stop)."""

    strategy: ProxStrategy
    rows: tuple[Tensor, ...]
    current_version: int | Tensor

    def minibatch(self, start: int, stop: int, behav_logp: Tensor, logp: Tensor, versions: Tensor) -> Tensor | None:
        """behav_logp, logp, versions: the minibatch's [stop − start, T] tensors."""
        own = tuple(row[start:stop] for row in self.rows)
        return self.strategy.minibatch(own, behav_logp, logp, versions, self.current_version)
