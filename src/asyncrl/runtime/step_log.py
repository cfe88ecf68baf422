"""A finished step, written down: its row in ``metrics.jsonl`` (and the trackers), sample
completions when due (``run.log_completions_every``; on the console too with
``run.print_completions``), its line in ``ledger.jsonl`` and the progress
line. The files are the session's; a checkpoint flushes them."""

from __future__ import annotations

from asyncrl.runtime.record import clipped_frac
from asyncrl.runtime.session import Session
from asyncrl.runtime.timing import StepTimer
from asyncrl.types import Batch


class StepLog:
    def __init__(self, session: Session):
        self.session = session

    def write(self, step: int, record: dict, batch: Batch, source, timer: StepTimer) -> None:
        """``record``: the step's record; gets the run's clock, each reward function's mean raw
        value (``reward/<function>``), the share of completions cut at the length limit and the
        phase seconds."""
        session = self.session
        record["elapsed_s"] = session.elapsed_s()
        clipped = clipped_frac(batch, getattr(session.tokenizer, "eos_token_id", None))
        if clipped is not None:
            record["completion_clipped_frac"] = clipped
        if session.rewards is not None:
            record.update(session.rewards.metrics(batch.reward_parts, batch.reward_failed))
        record.update(timer.record())
        session.metrics.write(step, record)
        if session.completions.due(step):
            names = session.rewards.names if session.rewards is not None else ()
            rows = session.completions.write(step, batch, session.tokenizer, session.metrics, names)
            table = session.completions.printed(step, rows)
            if table is not None:
                session.progress.show(table)
        session.ledger.write(step, batch.group_ids.unique().tolist(), source.take_dropped_groups())
        session.progress.step(step, record, ess_warning="ess_warning" in record)
