"""The training loop, the same for every mode: the modes differ only in where batches come from.

    start      = RunStart.check(cfg)                  refusals that cost little: nothing written yet
    policy_dir = warm_start_if_needed(cfg, ...)       policy.model_path, or the cached warm start
    session    = Session.open(start, policy_dir)      model, run dir and lock, config.yaml, row files
    source     = open_source(cfg, session)            run.mode: sync | simulated | async (processes, Ray)
    for each step, each phase timed (timing/<phase>_s in the step's row):
        batch = source.next_batch(version, step)      generate: CPU tensors (the trainer moves them)
        stats = trainer.step(batch)                   train: advantages → prox → minibatch updates → v + 1
        source.publish(model, version)                publish: the weight channel (async), a snapshot
        evaluations.run_if_due(step, record)          evaluate: eval.every steps and the last one
        ess.after_step(step, record, ...)             ESS check: warn, roll back or stop
        signal.after_step(step, record, batch)        no-signal check: warn once (empty completions, flat rewards)
        step_log.write(step, record, ...)             log: metrics row, completions, ledger, progress
        checkpoints.save_if_due(step, ...)            checkpoint: run.checkpoint_every and the last step
        callbacks.after_step(step, record, ...)       the user's callbacks (asyncrl.Trainer), this process
    summary = session.finish(...)

A SIGTERM or SIGINT stops the loop at the next safe point, checkpoints the last finished step and
raises :class:`~asyncrl.runtime.signals.Interrupted`; the run continues with ``--resume``. A callback
that raises stops it the same way, with :class:`~asyncrl.runtime.callbacks.CallbackError`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import torch

from asyncrl.config import Config
from asyncrl.core.loader import ConfigError
from asyncrl.config.threads import thread_plan
from asyncrl.distributed.agreement import agree
from asyncrl.distributed.liveness import Peers
from asyncrl.runtime.ranks import LeaderTrainer, follow
from asyncrl.distributed.world import RankLost, World, close_world, init_world, node_ranks, torchrun_world
from asyncrl.runtime.callbacks import CallbackError, RunCallbacks
from asyncrl.runtime.checkpointing import Checkpoints, resume_hint
from asyncrl.runtime.ess_check import EssCheck
from asyncrl.runtime.evaluate import Evaluations
from asyncrl.runtime.record import Totals, step_record
from asyncrl.runtime.session import RunStart, Session, warm_start_if_needed
from asyncrl.runtime.signal_check import SignalCheck
from asyncrl.runtime.signals import Interrupted, StopRequested
from asyncrl.runtime.sources import BatchSource, open_source
from asyncrl.runtime.step_log import StepLog
from asyncrl.runtime.timing import LoopClock, StepTimer
from asyncrl.runtime.validate import validate_run
from asyncrl.training.reference import build_reference
from asyncrl.training.trainer import Learner


def train(cfg: Config, callbacks: Sequence[Any] = ()) -> dict | None:
    """Run ``cfg`` to the end (or resume it, per ``run.resume``); returns the summary (also written
    to ``<run dir>/summary.json``). Under ``torchrun`` rank 0 runs the loop and the other ranks
    follow it (asyncrl.runtime.ranks); they return None. ``callbacks``: objects with
    ``on_step_end`` / ``on_evaluate`` / ``on_save`` (asyncrl.runtime.callbacks), called by rank 0.
    ``cfg`` is checked against the parts first (asyncrl.runtime.validate; a no-op for a config
    already loaded with ``load_run_config``), so a Config built in Python is held to the same rules."""
    validate_run(cfg)
    world, peers = torchrun_world(), None
    init_world(world, cfg.policy.device, cfg.trainer.fsdp.timeout_s)
    try:
        if world.distributed:  # the ranks agree on every setting before anything is written
            peers = Peers(world, cfg.trainer.fsdp.timeout_s, agree(cfg, world))
        if not world.leader:
            follow(cfg, peers)
            return None
        return _lead(cfg, world, RunCallbacks(callbacks), peers)
    except (RuntimeError, RankLost) as err:
        fault = peers.fault(err) if peers is not None else None
        if fault is None:
            raise
        raise fault from None
    finally:
        if peers is not None:
            peers.close()
        close_world()


def _trainer(cfg: Config, session: Session, peers: Peers | None):
    """The trained model's Learner: on the session's model, or, with several ranks, on that model
    sharded, the session then holding rank 0's replica in the generation dtype."""
    reference = build_reference(cfg, session.model, session.policy_dir)  # None unless trainer.kl_coef > 0
    if peers is not None:
        leader = LeaderTrainer(cfg, session.model, session.policy_dir, peers, reference)
        session.model = leader.model  # the loaded model is sharded now: the run reads rank 0's replica
        return leader
    return Learner(session.model, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed,
                   reference=reference, lm_head_fp32=cfg.policy.lm_head_fp32)


def workers_before_eval(cfg: Config) -> bool:
    """Whether the rollout engines must be started and ready before the step-0 evaluation: on CUDA,
    where an engine sizes its memory when it starts (vLLM measures the free GPU memory; memory the
    evaluation takes or frees meanwhile shrinks its KV cache or stops it), as they do before the
    trainer's first step allocates its optimizer state. On the CPU the evaluation overlaps their
    start-up."""
    return torch.device(cfg.policy.device).type == "cuda"


def open_session(cfg: Config) -> Session:
    """The run's session, its starting weights built first (the warm start: minutes, the first time)."""
    start = RunStart.check(cfg)  # a refused run is refused before the warm start's minutes
    with start.released_on_error():
        policy_dir = warm_start_if_needed(cfg, start.task, start.progress)
        return Session.open(start, policy_dir)


def _before_first_step(cfg: Config, session: Session, source: BatchSource, evaluations: Evaluations,
                       callbacks: RunCallbacks) -> None:
    """The step-0 evaluation (not on resume) and the rollout workers' start-up, in the device's order."""
    engines_first = workers_before_eval(cfg)
    if engines_first:
        source.wait_ready()
    if session.resume is None:
        session.progress.phase("evaluating the starting policy")
        eval_acc = evaluations.run(0)  # on the CPU: overlaps with the workers' start-up
        session.progress.update(0, eval_acc=eval_acc, elapsed_s=session.elapsed_s())
        if callbacks and evaluations.last:
            callbacks.evaluated({"step": 0, **evaluations.last})
    else:
        session.progress.update(session.start_step, elapsed_s=session.elapsed_s())
    if not engines_first:
        source.wait_ready()


class _BatchFailed(Exception):
    """An environment past its failure policy, or a reward function or environment breaking its
    contract, while a step's batch was being made: nothing of that step was trained, so the last
    finished step can be checkpointed like a stop signal's."""

    def __init__(self, error: ConfigError):
        super().__init__(str(error))
        self.error = error

    def told(self, done: int, saved) -> ConfigError:
        """The same error (its type kept, for the API's ``except EnvError``), its one line saying
        where the run stopped and how it continues."""
        if saved:  # else there is nothing new to resume from: the line stays as the error said it
            self.error.args = (f"{self.error} (stopped after step {done}, checkpointed in {saved}: "
                               "--resume continues from it)",)
        return self.error


def _generate(source: BatchSource, version: int, step: int):
    try:
        return source.next_batch(version, step)
    except ConfigError as err:
        raise _BatchFailed(err) from err


def _stop(cfg: Config, session: Session, trainer, source: BatchSource, checkpoints: Checkpoints, done: int,
          peers: Peers | None = None):
    """A run stopped after step ``done`` (a stop signal, a callback's error): its checkpoint (unless
    ``run.checkpoint_on_signal`` is off), then the trainer and the session closed. Returns the
    checkpoint to resume from (None: none new). With several ranks, a rank that does not answer
    rank 0's roll call first is lost: RankLost, with no checkpoint (it needs every rank's shard)
    and no command sent to the others (a collective that would wait for the lost rank)."""
    if peers is not None:
        try:
            peers.roll_call()
        except RankLost:
            session.close()
            raise
    saved = None
    if cfg.run.checkpoint_on_signal and done > session.start_step:
        saved = checkpoints.save(done, trainer, source)
    trainer.close()
    session.close()
    return saved


def _lead(cfg: Config, world: World, callbacks: RunCallbacks, peers: Peers | None) -> dict:
    threads = thread_plan(cfg, ranks=node_ranks(world))
    torch.set_num_threads(threads.trainer)
    session = open_session(cfg)
    trainer = _trainer(cfg, session, peers)
    evaluations, ess, totals = Evaluations(session), EssCheck(session), Totals()
    signal = SignalCheck(session)
    clock, timer, step_log = LoopClock(evaluations), StepTimer(), StepLog(session)
    checkpoints = Checkpoints(session, totals, parts=(evaluations, clock, ess),
                              saved=None if peers is None else peers.note_run)
    if peers is not None:  # where the run continues, should a rank be lost; a stop signal's roll calls
        peers.note_run(resume_hint(session.run_dir), stop=session.stop)
    if session.resume is not None:
        checkpoints.restore(session.resume, trainer)
        print(f"asyncrl: {session.resume.announcement(cfg.trainer.steps)}", file=sys.stderr)
    done = session.start_step  # the last finished step
    with session.stop, open_source(cfg, session) as source, session.progress as progress:
        evaluations.generate_with(source)  # through its engine when it holds one in this process (vLLM)
        try:
            _before_first_step(cfg, session, source, evaluations, callbacks)
            clock.start()
            progress.phase("first batch")
            for step in range(done + 1, cfg.trainer.steps + 1):
                timer.new_step()
                version = trainer.version
                with timer("generate"):
                    batch = _generate(source, version, step)
                with timer("train"):
                    stats = trainer.step(batch)
                source.observe(stats, wait_frac=timer.waited() / timer.elapsed())  # async: paces the workers
                with timer("publish"):
                    source.publish(trainer.model, trainer.version)
                record = step_record(batch, version, stats, source.step_metrics(), wait_s=timer.waited(),
                                     step_s=timer.elapsed(), n_generators=source.n_generators)
                totals.add(record)
                with timer("evaluate"):
                    evaluations.run_if_due(step, record)
                with timer("ess_check"):
                    ess_action = ess.after_step(step, record, trainer, source)
                signal.after_step(step, record, batch)
                with timer("log"):
                    step_log.write(step, record, batch, source, timer)
                with timer("checkpoint"):
                    saved = checkpoints.save_if_due(step, trainer, source, now=ess_action == "stop")
                done = step
                callbacks.after_step(step, record, evaluated=evaluations.due(step), checkpoint=saved)
                if ess_action == "stop":  # the ESS warning's stop: a finished run, shorter
                    break
                session.stop.check()
        except (StopRequested, CallbackError) as stop:
            saved = _stop(cfg, session, trainer, source, checkpoints, done, peers)
            if isinstance(stop, CallbackError):
                raise stop.after(done, saved) from None
            raise Interrupted(stop.signum, done, saved) from None
        except _BatchFailed as failed:  # the last finished step is intact: keep it, then say so
            saved = _stop(cfg, session, trainer, source, checkpoints, done, peers)
            raise failed.told(done, saved) from None
        trainer.close()
        extra = {**totals.summary(done), **ess.summary(), **source.summary(),
                 "stopped_early": done < cfg.trainer.steps, "threads": threads.as_dict()}
    return session.finish(done, evaluations.summary(), extra, clock.seconds())
