"""Batch sources: where the training loop's batches come from, one per ``run.mode``.

A source has ``next_batch(version, step) -> Batch``, ``publish(model, version)``,
``step_metrics() -> dict`` (the step's generation and weight-sync figures, under the same names in
every mode), ``observe(stats, wait_frac)`` (the train step's statistics and the share of the step spent waiting
for the batch, e.g. to adapt the look-ahead window),
``take_dropped_groups()`` (group ids dropped unused since the last call, for the
ledger), ``take_episode_records()`` (the rows of the episodes behind the last ``step_metrics``, for
``episodes.jsonl``; [] for single completions), ``state_dict()`` (what a checkpoint needs to resume it: prompt cursor, RNGs, buffered and
in-flight work; a source restores it from ``session.resume`` when it is built), ``wait_ready()``,
``summary()``, ``n_generators``, and is a context manager that releases its workers. Optionally
``eval_engine()``: an engine in this process that evaluation may generate through (one with
``with_sampling``, holding the newest weights), or None; a source without it (async: its engines are
in other processes) leaves evaluation on the trainer's model. A new mode is one source plus one line in
:data:`asyncrl.core.registries.MODES` (a ``ModeEntry``: its import path, and whether it has a look-ahead window).
"""

from __future__ import annotations

from asyncrl.core.import_path import resolve
from asyncrl.core.registries import MODES


def open_source(cfg, session):
    """The batch source of ``run.mode``: its entry of :data:`asyncrl.core.registries.MODES`, called
    ``(cfg, session)``."""
    return resolve(MODES[cfg.run.mode].target)(cfg, session)
