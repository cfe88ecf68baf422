"""User callbacks of a run (``asyncrl.Trainer(..., callbacks=[...])``), called by the training loop in
the trainer process, never sent anywhere (no pickling), in every mode; under ``torchrun`` only
rank 0 runs the loop, so only rank 0 calls them.

A callback is any object with one or more of these methods (the names of transformers'
``TrainerCallback``, each given the step's row as ``metrics.jsonl`` holds it, a copy):

    on_step_end(row)   after every step, its row written
    on_evaluate(row)   after an evaluation: the step-0 one (row: its metrics) and every later one
                       (row: the step's row, whose eval_* keys are the evaluation's)
    on_save(row)       after a checkpoint: the step's row plus "checkpoint", its absolute path

They run at the end of the step, in that order, after its checkpoint: a callback that raises stops
the run there, as a stop signal does (checkpoint of the last finished step, row files closed, the
run directory released), with one line naming it: :class:`CallbackError`.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from asyncrl.core.errors import AsyncRLError
from asyncrl.core.user_code import first_line
from asyncrl.tracking.metrics import json_safe

HOOKS = ("on_step_end", "on_evaluate", "on_save")


class CallbackError(AsyncRLError, RuntimeError):
    """A callback raised: the run stopped. ``callback`` names it (``Class.hook``), ``error`` is what
    it raised (with its traceback), ``step`` the last finished step, ``checkpoint`` the checkpoint to
    resume from (None: none new)."""

    def __init__(self, callback: str, error: Exception, step: int | None = None, checkpoint: Path | None = None):
        self.callback, self.error, self.step, self.checkpoint = callback, error, step, checkpoint
        message = f"callback {callback} raised {first_line(error)}{_where(error)}"
        if step is not None:
            where = f"checkpoint {checkpoint}" if checkpoint else "no new checkpoint"
            message += f"; the run stopped after step {step} ({where})"
        super().__init__(message)

    def after(self, step: int, checkpoint: Path | None) -> CallbackError:
        """The same failure, told with where the run stopped."""
        return CallbackError(self.callback, self.error, step, checkpoint)


def _where(error: Exception) -> str:
    """`` (file:line)`` of the innermost frame that raised ``error``; empty when unknown."""
    frames = traceback.extract_tb(error.__traceback__)
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def callback_name(callback: Any) -> str:
    return getattr(type(callback), "__qualname__", type(callback).__name__)


def hooks_of(callback: Any) -> list[str]:
    """The hooks ``callback`` defines (callable attributes named in :data:`HOOKS`)."""
    return [hook for hook in HOOKS if callable(getattr(callback, hook, None))]


class RunCallbacks:
    """The run's callbacks, called with a copy of each row; a raise becomes :class:`CallbackError`."""

    def __init__(self, callbacks: Sequence[Any] = ()):
        self.callbacks = list(callbacks)

    def __bool__(self) -> bool:
        return bool(self.callbacks)

    def evaluated(self, row: dict) -> None:
        """After the step-0 evaluation: ``row`` is its row."""
        self._call("on_evaluate", row)

    def after_step(self, step: int, record: dict, *, evaluated: bool, checkpoint: Path | None) -> None:
        """After step ``step`` (its ``record`` written), its evaluation if there was one, and its
        checkpoint if one was saved."""
        if not self.callbacks:
            return
        row = {"step": step, **record}
        self._call("on_step_end", row)
        if evaluated:
            self._call("on_evaluate", row)
        if checkpoint is not None:
            self._call("on_save", {**row, "checkpoint": str(Path(checkpoint).absolute())})

    def _call(self, hook: str, row: dict) -> None:
        for callback in self.callbacks:
            method = getattr(callback, hook, None)
            if not callable(method):
                continue
            try:
                method(json_safe(row))  # a fresh copy each: one callback's edits reach no other
            except Exception as err:  # noqa: BLE001 (the user's code: any error stops the run)
                raise CallbackError(f"{callback_name(callback)}.{hook}", err) from None


def checked_callbacks(callbacks: Any) -> list[Any]:
    """``asyncrl.Trainer``'s ``callbacks``: a list of objects (a class is instantiated, as transformers
    does), each with at least one hook; ConfigError ``callbacks[i]`` otherwise."""
    from asyncrl.config import ConfigError

    if callbacks is None:
        return []
    if not isinstance(callbacks, (list, tuple)):
        callbacks = [callbacks]
    out = []
    for i, callback in enumerate(callbacks):
        if isinstance(callback, type):
            callback = callback()
        if any(c.__name__ == "TrainerCallback" and c.__module__.startswith("transformers")
               for c in type(callback).__mro__):
            raise ConfigError(f"callbacks[{i}]", f"{callback_name(callback)} is a transformers TrainerCallback, "
                                                 "whose hooks take (args, state, control); asyncrl calls "
                                                 f"{', '.join(HOOKS)} with the metrics row alone")
        if not hooks_of(callback):
            raise ConfigError(f"callbacks[{i}]", f"{callback_name(callback)} has none of the methods "
                                                 f"{', '.join(HOOKS)}")
        out.append(callback)
    return out
