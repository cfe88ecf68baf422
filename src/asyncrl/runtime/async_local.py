"""Asynchronous training on one machine: rollout workers (processes) generate continuously into the
staleness-bounded buffer while this process trains; weights go out through shared memory after
every step.

    admit work (buffer capacity) ─► workers ─► results ─► buffer ─► take batch ─► train ─► publish
"""

from __future__ import annotations

import os
import time

import torch

from asyncrl.buffer import Group, StalenessBuffer, concat_groups
from asyncrl.config import Config
from asyncrl.rollout import PromptStream
from asyncrl.runtime.session import Session
from asyncrl.runtime.stats import staleness_metrics
from asyncrl.runtime.worker import WorkerSpec, WorkUnit
from asyncrl.trainer import Trainer


class Feeder:
    """Turns the prompt stream into work units, admitted by the buffer's staleness rule."""

    def __init__(self, session: Session, cfg: Config):
        ro = cfg.rollout
        self.n = ro.samples_per_prompt
        self.unit_prompts = cfg.async_.unit_prompts or max(1, ro.prompts_per_step // cfg.async_.n_workers)
        self.index = {p.uid: i for i, p in enumerate(session.train_problems)}
        self.prompts = PromptStream(session.train_problems, self.unit_prompts, seed=cfg.run.seed)
        self.next_unit = 0
        self.next_group = 0

    def admit(self, pool, buffer: StalenessBuffer, version: int) -> int:
        admitted = 0
        while buffer.try_admit(self.unit_prompts * self.n, version):
            problems = self.prompts.next()
            groups = list(range(self.next_group, self.next_group + len(problems)))
            pool.submit(WorkUnit(self.next_unit, [self.index[p.uid] for p in problems], groups, self.n))
            self.next_unit += 1
            self.next_group += len(problems)
            admitted += 1
        return admitted


def _split_groups(batch, n: int) -> list[Group]:
    return [Group(batch.select(torch.arange(i, i + n))) for i in range(0, len(batch), n)]


class AsyncLoop:
    def __init__(self, cfg: Config, session: Session, trainer: Trainer, pool, shared):
        self.cfg, self.session, self.trainer, self.pool, self.shared = cfg, session, trainer, pool, shared
        self.buffer = StalenessBuffer(cfg.async_.max_staleness, cfg.rollout.prompts_per_step,
                                      cfg.rollout.samples_per_prompt,
                                      recency_decay=cfg.async_.recency_decay, seed=cfg.run.seed,
                                      max_ahead=cfg.async_.max_ahead)
        self.feeder = Feeder(session, cfg)
        self.gen_busy = 0.0  # worker generation seconds since the last step
        self.gen_tokens = 0
        self.weight_updates = 0
        self.lost_units = 0

    def _collect(self, messages) -> None:
        for kind, _, payload in messages:
            if kind != "result":
                continue
            self.gen_busy += payload["gen_time_s"]
            self.weight_updates += payload["weight_updates"]
            self.gen_tokens += int(payload["batch"].completion_mask.sum())
            for group in _split_groups(payload["batch"], self.cfg.rollout.samples_per_prompt):
                self.buffer.add(group)

    def _service(self, timeout: float) -> None:
        for unit in self.pool.restart_dead():
            self.buffer.mark_lost(len(unit.problem_indices) * unit.n)
            self.lost_units += 1
        self.feeder.admit(self.pool, self.buffer, self.trainer.version)
        self._collect(self.pool.poll(timeout))

    def next_batch(self, step: int):
        """Block until a batch of fresh groups is ready (servicing workers meanwhile)."""
        every = self.cfg.async_.hard_sync_every
        bound = 0 if every and step % every == 0 else None
        self._service(0.0)
        while not self.buffer.ready(self.trainer.version, bound):
            self._service(0.2)
        groups = self.buffer.take(self.trainer.version, bound)
        return concat_groups(groups, self.session.tokenizer.pad_token_id)

    def step(self, step: int) -> dict:
        t0 = time.perf_counter()
        dropped_before = self.buffer.dropped
        batch = self.next_batch(step)
        wait = time.perf_counter() - t0
        version = self.trainer.version
        record = {"reward_mean": batch.rewards.mean().item(), **staleness_metrics(batch, version)}
        stats = self.trainer.step(batch)
        t1 = time.perf_counter()
        self.shared.publish(self.trainer.model, self.trainer.version)
        publish = time.perf_counter() - t1
        self._service(0.0)
        wall = time.perf_counter() - t0
        record.update(stats)
        record.update({
            "version": self.trainer.version, "trainer_wait_s": wait, "weight_publish_s": publish,
            "step_time_s": wall, "gen_busy_s": self.gen_busy, "gen_tokens": self.gen_tokens,
            "gen_tokens_per_s": self.gen_tokens / max(wall, 1e-9),
            "generator_util": min(1.0, self.gen_busy / max(wall * self.cfg.async_.n_workers, 1e-9)),
            "trainer_util": stats["train_time_s"] / max(wall, 1e-9),
            "buffer_samples": len(self.buffer), "inflight_units": self.pool.n_inflight,
            "dropped_samples": self.buffer.dropped - dropped_before,
            "dropped_samples_total": self.buffer.dropped, "lost_units_total": self.lost_units,
            "worker_restarts": self.pool.restarts, "weight_updates_midgen": self.weight_updates,
            "completion_len_mean": int(batch.completion_mask.sum()) / len(batch),
        })
        self.gen_busy, self.gen_tokens, self.weight_updates = 0.0, 0, 0
        return record


def cpu_plan(cfg: Config) -> tuple[int | None, list[int | None]]:
    """(trainer CPU, worker CPUs): one core each when the machine has enough, else no pinning."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    n = cfg.async_.n_workers
    if not cfg.async_.pin_cpus or cfg.async_.backend != "local" or len(cpus) < n + 1:
        return None, [None] * n
    return cpus[0], cpus[1:n + 1]


def worker_specs(cfg: Config, policy_dir) -> list[WorkerSpec]:
    _, worker_cpus = cpu_plan(cfg)
    return [WorkerSpec(worker_id=i, config=cfg.to_dict(), policy_dir=str(policy_dir),
                       seed=cfg.run.seed + 7919 * i, chunk_tokens=cfg.async_.chunk_tokens,
                       interruptible=cfg.async_.interruptible, cpu=worker_cpus[i])
            for i in range(cfg.async_.n_workers)]


def run_async(cfg: Config) -> dict:
    """Train with overlapped rollout; returns the run summary."""
    from asyncrl.runtime.backends import open_backend

    torch.set_num_threads(cfg.policy.torch_threads)
    session = Session.open(cfg)
    trainer = Trainer(session.model, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature,
                      seed=cfg.run.seed)
    trainer_cpu, _ = cpu_plan(cfg)
    original_cpus = os.sched_getaffinity(0) if trainer_cpu is not None else None
    with open_backend(cfg, session) as (pool, shared):
        if trainer_cpu is not None:  # after spawning, so workers do not inherit the trainer's mask
            os.sched_setaffinity(0, {trainer_cpu})
        loop = AsyncLoop(cfg, session, trainer, pool, shared)
        loop.feeder.admit(pool, loop.buffer, trainer.version)  # workers start generating now
        with session.progress as progress:
            eval_acc = session.evaluate(0)  # overlaps with the first rollouts
            progress.update(0, eval_acc=eval_acc)
            loop._collect(pool.wait_ready())
            train_started = time.perf_counter()
            totals = {"gen": 0.0, "wait": 0.0, "prox": 0.0, "train": 0.0}
            for step in range(1, cfg.trainer.steps + 1):
                record = loop.step(step)
                for key, name in (("gen", "gen_busy_s"), ("wait", "trainer_wait_s"),
                                  ("prox", "prox_time_s"), ("train", "train_time_s")):
                    totals[key] += record[name]
                session.finish_step(step, record, trainer)
            train_wall = time.perf_counter() - train_started - session.eval_time_s
    if original_cpus is not None:
        os.sched_setaffinity(0, original_cpus)
    steps = max(cfg.trainer.steps, 1)
    return session.finish(cfg.trainer.steps, {
        "train_wall_s": train_wall, "time_per_step_s": train_wall / steps,
        "gen_time_per_step_s": totals["gen"] / steps, "train_time_per_step_s": totals["train"] / steps,
        "prox_time_per_step_s": totals["prox"] / steps, "wait_time_per_step_s": totals["wait"] / steps,
        "dropped_samples_total": loop.buffer.dropped, "worker_restarts": pool.restarts,
        "run_dir": str(session.run_dir), "max_staleness": cfg.async_.max_staleness,
    })
