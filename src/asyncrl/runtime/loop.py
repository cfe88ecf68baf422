"""The training loop, the same for every mode: the modes differ only in where batches come from.

    session = Session.open(cfg)                   model, tokenizer, task, run dir, metrics, progress
    source  = SOURCES[cfg.run.mode](cfg, session)  sync | simulated | async (local processes, Ray)
    for each step:
        batch = source.next_batch(version)         CPU tensors; the trainer moves them to its device
        stats = trainer.step(batch)                advantages → prox → minibatch updates → version + 1
        source.publish(model, version)             the weight channel (async), a snapshot (simulated)
        session.finish_step(step, record)          eval / metrics / progress / checkpoint when due
    summary = session.finish(...)
"""

from __future__ import annotations

import time

import torch

from asyncrl.config import Config
from asyncrl.runtime.record import Totals, step_record
from asyncrl.runtime.session import Session
from asyncrl.runtime.sources import SOURCES
from asyncrl.trainer import Trainer


def train(cfg: Config) -> dict:
    """Run ``cfg`` to the end; returns the summary (also written to ``<run dir>/summary.json``)."""
    torch.set_num_threads(cfg.policy.torch_threads)
    session = Session.open(cfg)
    trainer = Trainer(session.model, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed)
    totals = Totals()
    with SOURCES[cfg.run.mode](cfg, session) as source, session.progress as progress:
        progress.update(0, eval_acc=session.evaluate(0))  # async: overlaps with the first rollouts
        source.wait_ready()
        started = time.perf_counter()
        for step in range(1, cfg.trainer.steps + 1):
            t0 = time.perf_counter()
            version = trainer.version
            batch = source.next_batch(version, step)
            waited = time.perf_counter() - t0
            stats = trainer.step(batch)
            source.publish(trainer.model, trainer.version)
            record = step_record(batch, version, stats, source.step_metrics(), wait_s=waited,
                                 step_s=time.perf_counter() - t0, n_generators=source.n_generators)
            totals.add(record)
            session.finish_step(step, record, trainer)
        train_wall = time.perf_counter() - started - session.eval_time_s
        extra = source.summary()
    return session.finish(cfg.trainer.steps, {**totals.summary(cfg.trainer.steps), **extra}, train_wall)
