"""A finished step, written down: its row in ``metrics.jsonl`` (and the trackers), sample
completions when due (``run.log_completions_every``; on the console too with
``run.print_completions``), its episodes when due (``run.log_episodes_every``), its line in
``ledger.jsonl`` and the progress
line. The files are the session's; a checkpoint flushes them."""

from __future__ import annotations

import sys

from asyncrl.runtime.memory import GrowthWatch, rss_mb
from asyncrl.runtime.record import clipped_frac
from asyncrl.runtime.session import Session
from asyncrl.runtime.timing import StepTimer
from asyncrl.types import Batch


class StepLog:
    def __init__(self, session: Session):
        self.session = session
        self._warned_cut = False
        self.memory = GrowthWatch()

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
        record["memory/trainer_rss_mb"] = rss_mb()
        session.metrics.write(step, record)
        if session.completions.due(step):
            names = session.rewards.names if session.rewards is not None else ()
            rows = session.completions.write(step, batch, session.tokenizer, session.metrics, names)
            table = session.completions.printed(step, rows)
            if table is not None:
                session.progress.show(table)
        if session.episodes is not None:
            # a plugin's source may predate episode rows: it writes none
            session.episodes.write(step, getattr(source, "take_episode_records", list)())
        session.ledger.write(step, batch.group_ids.unique().tolist(), source.take_dropped_groups())
        session.progress.step(step, record, ess_warning="ess_warning" in record)
        self._warn_cut_episodes(step, record)
        for name in ("memory/trainer_rss_mb", "memory/worker_rss_mb"):
            if name in record:
                warning = self.memory.observe(step, name, record[name])
                if warning is not None:
                    print(warning, file=sys.stderr)

    def _warn_cut_episodes(self, step: int, record: dict) -> None:
        """Once per run: episodes ended by ``env.episode_tokens`` (counted every step in
        ``episode/end_episode_tokens``) train on what they had, cut; say so where it is seen."""
        cut = record.get("episode/end_episode_tokens", 0.0)
        if cut > 0 and not self._warned_cut:
            self._warned_cut = True
            budget = self.session.cfg.env.episode_tokens
            print(f"asyncrl: warning: step {step}: {cut:.0%} of episodes ran out of env.episode_tokens={budget} "
                  "and were cut (episode/end_episode_tokens); raise it if they need more room", file=sys.stderr)
