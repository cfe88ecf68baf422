"""The no-learning-signal warning: a run that trains on nothing says so, once, in one line.

Two ways a GRPO step has nothing to learn from, each with its likely cause:

* every sampled completion is empty (the policy ends at once: a starting model that does not answer
  these prompts, such as a warm start trained to stop), measured as ``empty_completion_frac``
  (completions with no token but special ones), a column of ``metrics.jsonl``;
* every prompt group has zero advantage (``frac_zero_adv_groups`` 1: each group's samples got the
  same reward, so the group-normalized advantages are all 0 and the gradient is 0).

When either holds for :data:`WINDOW` consecutive steps the run prints the warning (through the run's
progress display, else ``asyncrl: ...`` on stderr) and goes on: a run may recover, and the warning
is not repeated.
"""

from __future__ import annotations

import sys

import torch

from asyncrl.types import Batch

WINDOW = 5  # consecutive steps without a signal before the warning

EMPTY = ("every sampled completion is empty: the model stops at once; is the starting model "
         "(policy.model_path, or the embedded warm start) one that answers these prompts?")
NO_SPREAD = ("all groups have zero reward spread (mean reward {reward:.2f}): the reward does not separate "
             "a prompt's samples, so the gradient is 0; check the reward on a few completions "
             "(completions.jsonl), or the prompts' difficulty")


def empty_completion_frac(batch: Batch, special_ids: list[int]) -> float:
    """Share of the batch's completions with no token besides special ones (eos, pad)."""
    if len(batch) == 0:
        return 0.0
    special = torch.tensor(special_ids, device=batch.completion_ids.device)
    content = batch.completion_attention & ~torch.isin(batch.completion_ids, special)
    return (~content.any(dim=1)).float().mean().item()


class NoSignalMonitor:
    """Counts consecutive steps without a learning signal; :meth:`update` returns the warning the
    first time a run of :data:`WINDOW` such steps completes, else None."""

    def __init__(self, window: int = WINDOW):
        self.window = window
        self.empty_steps = self.flat_steps = 0
        self.warned = False

    def update(self, record: dict) -> str | None:
        """``record``: the step's metrics (``empty_completion_frac``, ``frac_zero_adv_groups``,
        ``reward_mean``); a missing key counts as a signal."""
        self.empty_steps = self.empty_steps + 1 if record.get("empty_completion_frac", 0.0) >= 1.0 else 0
        self.flat_steps = self.flat_steps + 1 if record.get("frac_zero_adv_groups", 0.0) >= 1.0 else 0
        if self.warned:
            return None
        if self.empty_steps >= self.window:
            message = EMPTY
        elif self.flat_steps >= self.window:
            message = NO_SPREAD.format(reward=record.get("reward_mean", float("nan")))
        else:
            return None
        self.warned = True
        return f"warning: no learning signal for {self.window} steps: {message}"


class SignalCheck:
    """The run's :class:`NoSignalMonitor`: adds ``empty_completion_frac`` to each step's record,
    and prints the warning once."""

    def __init__(self, session, window: int = WINDOW):
        self.session = session  # the tokenizer's special ids, the progress display, run.progress
        self.special_ids: list[int] | None = None  # read at the first step: the tokenizer is loaded by then
        self.monitor = NoSignalMonitor(window)

    def after_step(self, step: int, record: dict, batch: Batch) -> None:
        if self.special_ids is None:
            self.special_ids = sorted(set(self.session.tokenizer.all_special_ids))
        record["empty_completion_frac"] = empty_completion_frac(batch, self.special_ids)
        warning = self.monitor.update(record)
        if warning is None:
            return
        line = f"step {step}: {warning}"
        if self.session.cfg.run.progress:
            self.session.progress.log(line)
        else:
            print(f"asyncrl: {line}", file=sys.stderr, flush=True)
