"""Resumable checkpoints of a run (the files: :mod:`asyncrl.training.checkpoint`): every
``run.checkpoint_every`` steps, at the last step, when the ESS warning stops the run and on a stop
signal. A checkpoint holds the model, the trainer, the batch source, the run totals and the state
of the run's parts; a resumed run restores them all before its first step.

The parts' state sits under the checkpoint's ``"session"`` entry, flat, as checkpoints have held
it from the start (``eval_history``, ``elapsed_s``, ``train_wall_s``, ``ess_monitor``, ...)."""

from __future__ import annotations

from pathlib import Path

from asyncrl.runtime.record import Totals
from asyncrl.runtime.resume import Resume
from asyncrl.runtime.session import Session
from asyncrl.runtime.timing import due
from asyncrl.training.checkpoint import latest_checkpoint, save_checkpoint
from asyncrl.training.fingerprint import model_fingerprint


class Checkpoints:
    """Saves the run when due and restores it on resume. ``parts``: objects with ``state_dict()``
    and ``load_state_dict(state)`` whose state goes under ``"session"`` (their keys apart)."""

    def __init__(self, session: Session, totals: Totals, parts: tuple, saved=None):
        """``saved(resume)``, if given, is told after each save where the run continues (rank 0's
        note for a fault's line: asyncrl.distributed.liveness.Peers.note_run)."""
        self.session, self.totals, self.parts, self._saved = session, totals, parts, saved
        self._fingerprint: dict | None = None

    @property
    def fingerprint(self) -> dict:
        """What every checkpoint of the run fits (the same for all: the model's shape does not change);
        computed at the first save."""
        if self._fingerprint is None:
            self._fingerprint = model_fingerprint(self.session.cfg, self.session.model, self.session.tokenizer)
        return self._fingerprint

    def due(self, step: int) -> bool:
        return due(step, self.session.cfg.run.checkpoint_every, self.session.cfg.trainer.steps)

    def save_if_due(self, step: int, trainer, source, *, now: bool = False) -> Path | None:
        """Save ``step`` if due (or ``now``); returns its checkpoint, None when not due."""
        if now or self.due(step):
            return self.save(step, trainer, source)
        return None

    def save(self, step: int, trainer, source) -> Path:
        """Save step ``step``; the row files are flushed first, so that the checkpoint has its rows."""
        session = self.session
        for rows in (session.metrics, session.ledger, session.completions, session.episodes):
            if rows is not None:
                rows.flush()
        # the session's clock comes back when a resumed session opens
        parts = {"elapsed_s": session.elapsed_s(),
                 **{key: value for part in self.parts for key, value in part.state_dict().items()}}
        run_state = {"source": source.state_dict(), "session": parts, "totals": self.totals.state_dict()}
        saved = save_checkpoint(session.run_dir, step, session.model, session.tokenizer, trainer.state_dict(),
                                run_state, keep=session.cfg.run.keep_checkpoints, write_shards=trainer.write_shards,
                                shard_bytes=trainer.shard_bytes(), fingerprint=self.fingerprint,
                                weights=trainer.master_weights())
        if self._saved is not None:
            self._saved(resume_hint(session.run_dir))
        return saved

    def restore(self, resume: Resume, trainer) -> None:
        """The trainer, the totals and the parts from the checkpoint the run continues (the model
        and the global random state came back when the session opened)."""
        trainer.load_state_dict(resume.trainer_state)
        self.totals.load_state_dict(resume.run_state["totals"])
        for part in self.parts:
            part.load_state_dict(resume.run_state["session"])


def resume_hint(run_dir: Path | None) -> str:
    """Where a run that ends now continues: its newest checkpoint and the command ("" for no run)."""
    if run_dir is None:
        return ""
    newest = latest_checkpoint(Path(run_dir))
    if newest is None:
        return f"{run_dir} has no checkpoint to continue from"
    step = int(newest.name.removeprefix("step-"))
    return f"continue with: asyncrl train --resume {run_dir} (its checkpoint of step {step})"
