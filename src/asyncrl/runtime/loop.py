"""The training loop, the same for every mode: the modes differ only in where batches come from.

    session = Session.open(cfg)                   model, tokenizer, task, run dir, metrics, progress
                                                  (or all of it restored from the newest checkpoint)
    source  = open_source(cfg, session)            run.mode: sync | simulated | async (local processes, Ray)
    for each step:
        batch = source.next_batch(version)         CPU tensors; the trainer moves them to its device
        stats = trainer.step(batch)                advantages → prox → minibatch updates → version + 1
        source.publish(model, version)             the weight channel (async), a snapshot (simulated)
        session.finish_step(step, ...)             eval / metrics / ledger / progress / checkpoint when due
    summary = session.finish(...)

A SIGTERM or SIGINT stops the loop at the next safe point, checkpoints the last finished step and
raises :class:`~asyncrl.runtime.signals.Interrupted`; the run continues with ``--resume``.
"""

from __future__ import annotations

import sys
import time

import torch

from asyncrl.config import Config
from asyncrl.distributed.ranks import LeaderTrainer, follow
from asyncrl.distributed.world import RankLost, World, close_world, init_world, lost_rank, torchrun_world
from asyncrl.training.reference import build_reference
from asyncrl.runtime.record import Totals, step_record
from asyncrl.runtime.session import Session, workers_before_eval
from asyncrl.runtime.signals import Interrupted, StopRequested
from asyncrl.runtime.sources import open_source
from asyncrl.stability.monitor import EssStop
from asyncrl.training.trainer import Trainer


def train(cfg: Config) -> dict | None:
    """Run ``cfg`` to the end (or resume it, per ``run.resume``); returns the summary (also written
    to ``<run dir>/summary.json``). Under ``torchrun`` rank 0 runs the loop and the other ranks
    follow it (asyncrl.distributed.ranks); they return None."""
    world = torchrun_world()
    init_world(world, cfg.policy.device)
    try:
        if not world.leader:
            follow(cfg, world)
            return None
        return _lead(cfg, world)
    except RuntimeError as err:
        if world.distributed and lost_rank(err):
            raise RankLost(world.rank, err) from None
        raise
    finally:
        close_world()


def _trainer(cfg: Config, session: Session, world: World):
    """The trained model's Trainer: on the session's model, or on a sharded copy of it with several ranks."""
    reference = build_reference(cfg, session.model, session.policy_dir)  # None unless trainer.kl_coef > 0
    if world.distributed:
        return LeaderTrainer(cfg, session.model, session.policy_dir, world, reference)
    return Trainer(session.model, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed,
                   reference=reference, lm_head_fp32=cfg.policy.lm_head_fp32)


def _lead(cfg: Config, world: World) -> dict:
    torch.set_num_threads(cfg.policy.torch_threads)
    session = Session.open(cfg)
    trainer = _trainer(cfg, session, world)
    totals = Totals()
    if session.resume is not None:
        trainer.load_state_dict(session.resume.trainer_state)
        totals.load_state_dict(session.resume.run_state["totals"])
        print(f"asyncrl: {session.resume.announcement(cfg.trainer.steps)}", file=sys.stderr)
    done = session.start_step  # the last finished step
    with session.stop, open_source(cfg, session) as source, session.progress as progress:
        try:
            engines_first = workers_before_eval(cfg)
            if engines_first:  # on a GPU: engines size their memory before the evaluation allocates
                source.wait_ready()
            if session.resume is None:
                progress.phase("evaluating the starting policy")
                eval_acc = session.evaluate(0)  # async on the CPU: overlaps with the workers' start-up
                progress.update(0, eval_acc=eval_acc, elapsed_s=session.elapsed_s())
            else:
                progress.update(done, elapsed_s=session.elapsed_s())
            if not engines_first:
                source.wait_ready()
            session.start_clock()
            progress.phase("first batch")
            for step in range(done + 1, cfg.trainer.steps + 1):
                t0 = time.perf_counter()
                version = trainer.version
                batch = source.next_batch(version, step)
                waited = time.perf_counter() - t0
                stats = trainer.step(batch)
                source.observe(stats, wait_frac=waited / (time.perf_counter() - t0))
                source.publish(trainer.model, trainer.version)
                record = step_record(batch, version, stats, source.step_metrics(), wait_s=waited,
                                     step_s=time.perf_counter() - t0, n_generators=source.n_generators)
                totals.add(record)
                session.finish_step(step, record, batch, trainer, source, totals)
                done = step
                session.stop.check()
        except EssStop as early:  # the ESS warning's stop action: a finished run, shorter
            done = early.step
        except StopRequested as stop:
            saved = None
            if cfg.run.checkpoint_on_signal and done > session.start_step:
                saved = session.checkpoint(done, trainer, source, totals)
            trainer.close()
            session.close()
            raise Interrupted(stop.signum, done, saved) from None
        trainer.close()
        extra = {**source.summary(), "stopped_early": done < cfg.trainer.steps}
    return session.finish(done, {**totals.summary(done), **extra}, session.train_wall_s())
