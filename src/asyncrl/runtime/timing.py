"""Time in a run: the seconds of each phase of a step (:class:`StepTimer`), the training loop's
wall clock with the evaluations left out (:class:`LoopClock`), and when an every-N-steps job is due.

A step's row holds ``timing/<phase>_s`` for the phases of the loop::

    timing/train_s, timing/publish_s, timing/evaluate_s, timing/ess_check_s   this step's
    timing/log_s, timing/checkpoint_s                                          the step before's

The generate phase is the record's ``trainer_wait_s`` (:func:`~asyncrl.runtime.record.step_record`),
read by the summary, the bench and the reports under that name. A step's row is written
(``log``) before its checkpoint is saved, so that the checkpoint holds the row; the seconds of
writing it and of the checkpoint therefore reach the next step's row.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

# phases whose seconds are known only once the step's row is written
AFTER_ROW = ("log", "checkpoint")
# a phase the record holds under a name of its own (trainer_wait_s)
NAMED = ("generate",)


def due(step: int, every: int, last_step: int) -> bool:
    """Every ``every`` steps (0 = never) and always at the last step."""
    return step == last_step or (every > 0 and step % every == 0)


class StepTimer:
    """The seconds of each phase of the current step: ``with timer("train"): ...``."""

    def __init__(self):
        self.started = time.perf_counter()
        self.seconds: dict[str, float] = {}

    def new_step(self) -> None:
        """A step starts: the phases after the previous row are kept for this step's row."""
        self.started = time.perf_counter()
        self.seconds = {phase: s for phase, s in self.seconds.items() if phase in AFTER_ROW}

    @contextmanager
    def __call__(self, phase: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = time.perf_counter() - t0

    def elapsed(self) -> float:
        """Seconds since the step started."""
        return time.perf_counter() - self.started

    def waited(self) -> float:
        """Seconds the trainer waited for this step's batch."""
        return self.seconds.get("generate", 0.0)

    def record(self) -> dict[str, float]:
        """The phases timed so far, as record keys."""
        return {f"timing/{phase}_s": s for phase, s in self.seconds.items() if phase not in NAMED}


class LoopClock:
    """Seconds of the training loop over the whole run (resumes included): from after the step-0
    evaluation and the workers' start-up, less the evaluations after step 0."""

    def __init__(self, evaluations):
        self.evaluations = evaluations  # their seconds are left out
        self.prior_s = 0.0  # the loop's seconds before this process resumed the run
        self._started: tuple[float, float] | None = None  # (perf_counter, evaluation seconds) at start

    def start(self) -> None:
        self._started = (time.perf_counter(), self.evaluations.seconds)

    def seconds(self) -> float:
        if self._started is None:
            return self.prior_s
        started, eval_before = self._started
        return self.prior_s + time.perf_counter() - started - (self.evaluations.seconds - eval_before)

    def state_dict(self) -> dict:
        return {"train_wall_s": self.seconds()}

    def load_state_dict(self, state: dict) -> None:
        self.prior_s = float(state["train_wall_s"])
