"""Asynchronous batch source: rollout workers (local processes or Ray actors) generate continuously
into the staleness-bounded buffer while the trainer trains; weights go out through a weight channel
after every step.

    admit work (buffer rule) ─► workers ─► results ─► buffer ─► next_batch ─► trainer ─► publish
"""

from __future__ import annotations

import os
import time

import torch

from asyncrl.agents.stats import EpisodeStats
from asyncrl.runtime.buffer import Group, StalenessBuffer, concat_groups
from asyncrl.config import Config
from asyncrl.core.loader import ConfigError
from asyncrl.core.registries import BACKENDS, ENGINES, HOST
from asyncrl.rollout import PromptStream
from asyncrl.runtime.backends import open_backend
from asyncrl.runtime.session import Session
from asyncrl.runtime.worker import WorkerSpec, WorkUnit
from asyncrl.stability import AdaptiveWindow
from asyncrl.types import Batch


class Feeder:
    """Turns the prompt stream into work units, admitted by the buffer's staleness rule."""

    def __init__(self, session: Session, cfg: Config):
        ro = cfg.rollout
        self.n = ro.samples_per_prompt
        self.unit_prompts = cfg.async_.unit_prompts or max(1, ro.prompts_per_step // cfg.async_.n_workers)
        # positions in the task's whole train split, the list each worker indexes (train_problems
        # may leave out prompts dropped as too long)
        self.index = {p.uid: i for i, p in enumerate(session.task.problems("train"))}
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

    def state_dict(self) -> dict:
        return {"prompts": self.prompts.state_dict(), "next_unit": self.next_unit, "next_group": self.next_group}

    def load_state_dict(self, state: dict) -> None:
        self.prompts.load_state_dict(state["prompts"])
        self.next_unit, self.next_group = int(state["next_unit"]), int(state["next_group"])


def cpu_plan(cfg: Config) -> tuple[int | None, list[int | None]]:
    """(trainer CPU, worker CPUs): one core each when the machine has enough, else no pinning.
    No pinning off the trainer's machine, nor for an engine whose entry says ``pin_cpu=False`` (vLLM:
    its start-up compilation runs on many threads, which one core would serialize)."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    n = cfg.async_.n_workers
    on_host = HOST in BACKENDS[cfg.async_.backend].provides  # a Ray cluster places its actors itself
    unpinned = not cfg.async_.pin_cpus or not on_host or not ENGINES[cfg.rollout.engine].pin_cpu
    if unpinned or len(cpus) < n + 1:
        return None, [None] * n
    return cpus[0], cpus[1:n + 1]


def worker_specs(cfg: Config, policy_dir) -> list[WorkerSpec]:
    _, worker_cpus = cpu_plan(cfg)
    return [WorkerSpec(worker_id=i, config=cfg.to_dict(), policy_dir=str(policy_dir),
                       seed=cfg.run.seed + 7919 * i, chunk_tokens=cfg.async_.chunk_tokens,
                       interruptible=cfg.async_.interruptible, cpu=worker_cpus[i])
            for i in range(cfg.async_.n_workers)]


def _split_groups(batch: Batch, n: int) -> list[Group]:
    return [Group(batch.select(torch.arange(i, i + n))) for i in range(0, len(batch), n)]


class AsyncSource:
    def __init__(self, cfg: Config, session: Session):
        self.cfg, self.session = cfg, session
        self.fatal: ConfigError | None = None  # a worker's, kept by publish for the next batch
        session.progress.phase(f"starting {self.n_generators} rollout worker{'s' if self.n_generators > 1 else ''}")
        self.pool, self.channel = open_backend(cfg, worker_specs(cfg, session.policy_dir), session.model)
        self.trainer_cpu, _ = cpu_plan(cfg)
        self.original_cpus = os.sched_getaffinity(0) if self.trainer_cpu is not None else None
        if self.trainer_cpu is not None:  # after spawning, so workers do not inherit the trainer's mask
            os.sched_setaffinity(0, {self.trainer_cpu})
        a = cfg.async_
        self.buffer = StalenessBuffer(a.max_staleness, cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt,
                                      recency_decay=a.recency_decay, seed=cfg.run.seed, max_ahead=a.max_ahead)
        self.feeder = Feeder(session, cfg)
        self.lost_units = 0
        self.dropped_before = 0  # buffer.dropped when the step began
        self.metrics: dict[str, float] = {}
        self.episode_stats = EpisodeStats()  # of the units that arrived since the last step's metrics
        self.episode_records: list[dict] = []  # of the last step: episodes.jsonl
        self.restarts_before = 0  # worker restarts of the run before it was resumed
        self.adaptive = (AdaptiveWindow(a.adaptive, a.max_staleness, self.buffer.window)
                         if a.adaptive.enabled else None)
        if session.resume is not None:  # before any work is admitted
            self._restore(session.resume.source_state)
            # the workers must tag their tokens with the resumed version from the first one
            self.channel.publish(session.model, session.start_version)
        self.feeder.admit(self.pool, self.buffer, session.start_version)  # workers start generating now

    @property
    def n_generators(self) -> int:
        return self.cfg.async_.n_workers

    def _restore(self, state: dict) -> None:
        self.feeder.load_state_dict(state["feeder"])
        self.buffer.load_state_dict(state["buffer"])
        if self.adaptive is not None:
            self.adaptive.window = self.buffer.window
        self.lost_units, self.restarts_before = int(state["lost_units"]), int(state["worker_restarts"])
        for unit in state["inflight"]:  # admitted before the checkpoint, never returned: issue them again
            self.pool.submit(WorkUnit(**unit))

    def state_dict(self) -> dict:
        return {"feeder": self.feeder.state_dict(), "buffer": self.buffer.state_dict(),
                "inflight": [vars(u) for u in self.pool.inflight_units()],
                "lost_units": self.lost_units, "worker_restarts": self.restarts}

    @property
    def restarts(self) -> int:
        return self.restarts_before + self.pool.restarts

    def take_dropped_groups(self) -> list[int]:
        out, self.buffer.dropped_groups = self.buffer.dropped_groups, []
        return out

    def __enter__(self) -> "AsyncSource":
        return self

    def __exit__(self, *exc) -> None:
        self.pool.shutdown()
        if self.original_cpus is not None:
            os.sched_setaffinity(0, self.original_cpus)

    def _add(self, key: str, value: float) -> None:
        self.metrics[key] = self.metrics.get(key, 0.0) + value

    def _collect(self, messages) -> None:
        for kind, _, payload in messages:
            if kind != "result":
                continue
            batch = payload["batch"]
            self._add("gen_time_s", payload["gen_time_s"])
            self._add("weight_pull_s", payload["weight_pull_s"])
            self._add("weight_updates_midgen", payload["weight_updates"])
            self._add("gen_tokens", int(batch.completion_mask.sum()))
            if "rss_mb" in payload:  # the largest worker's, this step
                self.metrics["memory/worker_rss_mb"] = max(self.metrics.get("memory/worker_rss_mb", 0.0),
                                                           payload["rss_mb"])
            if payload.get("episode_stats") is not None:
                self.episode_stats.merge(payload["episode_stats"])
            for group in _split_groups(batch, self.cfg.rollout.samples_per_prompt):
                self.buffer.add(group)
            failed = payload.get("failed_groups", [])
            if failed:  # a failed episode's group: never trained, named in the ledger as dropped
                self.buffer.mark_failed(failed, len(failed) * payload["n"])

    def _service(self, version: int, timeout: float) -> None:
        for unit in self.pool.restart_dead():
            self.buffer.mark_lost(len(unit.problem_indices) * unit.n)
            self.lost_units += 1
        self.feeder.admit(self.pool, self.buffer, version)
        self._collect(self.pool.poll(timeout))

    def wait_ready(self) -> None:
        self.session.progress.phase("waiting for the workers to load the model")
        self._collect(self.pool.wait_ready())

    def next_batch(self, version: int, step: int) -> Batch:
        """Block until a batch of fresh groups is ready (servicing workers meanwhile)."""
        if self.fatal is not None:
            raise self.fatal
        every = self.cfg.async_.hard_sync_every
        bound = 0 if every and step % every == 0 else None
        self.dropped_before = self.buffer.dropped
        self._service(version, 0.0)
        while not self.buffer.ready(version, bound):
            self.session.stop.check()  # a stop signal need not wait for the data
            self._service(version, 0.2)
        groups = self.buffer.take(version, bound)
        return concat_groups(groups, self.session.tokenizer.pad_token_id)

    def observe(self, stats: dict[str, float], wait_frac: float) -> None:
        """After a train step: move the look-ahead window with the step's ESS and the share of the
        step the trainer spent waiting for its batch (``async.adaptive``)."""
        if self.adaptive is not None:
            self.buffer.window = self.adaptive.update(stats["ess_frac_first"], wait_frac)
            self.adaptive.window = self.buffer.window

    def publish(self, model: torch.nn.Module, version: int) -> None:
        t0 = time.perf_counter()
        self.channel.publish(model, version)
        self.metrics["weight_publish_s"] = time.perf_counter() - t0
        try:
            self._service(version, 0.0)
        except ConfigError as err:
            # a worker's fatal error (an environment past its failure policy): raised by the next
            # batch, so that the step just trained is written down and can be checkpointed first
            self.fatal = err

    def step_metrics(self) -> dict[str, float]:
        out = {"gen_time_s": 0.0, "gen_tokens": 0, "weight_pull_s": 0.0, "weight_updates_midgen": 0,
               **self.metrics,
               "buffer_samples": len(self.buffer), "inflight_units": self.pool.n_inflight,
               "dropped_samples": self.buffer.dropped - self.dropped_before,
               "dropped_samples_total": self.buffer.dropped, "lost_units_total": self.lost_units,
               "worker_restarts": self.restarts, "max_ahead": self.buffer.window}
        out.update(self.episode_stats.metrics())
        self.episode_records = self.episode_stats.records
        self.metrics, self.episode_stats = {}, EpisodeStats()
        return out

    def take_episode_records(self) -> list[dict]:
        """The rows of the episodes that arrived since the step before (asyncrl.agents.records)."""
        out, self.episode_records = self.episode_records, []
        return out

    def summary(self) -> dict:
        return {"dropped_samples_total": self.buffer.dropped, "worker_restarts": self.restarts,
                "max_staleness": self.cfg.async_.max_staleness}
