"""Rollout worker: pulls work units, generates with the newest published weights, scores, and
returns version-tagged groups. Started once and kept (spawning costs seconds of imports and model
build). The same class runs in a local process (:func:`worker_main`) or a Ray actor.

Interruptible generation: between decode chunks of ``chunk_tokens`` tokens the engine calls the
worker's hook, which checks the channel's version; if newer, it pulls the weights and hands them to
the engine, which continues the same sequences with them (later tokens carry the new version).

The channel fills an ``nn.Module``: the transformers engine's own model, or — for an engine that
holds its weights elsewhere (vLLM) — a staging copy of the plain model on ``policy.device``, whose
tensors are then handed to the engine's ``update_weights`` as they are (on a GPU: device to device,
no trip through host memory). The pull returns before the engine loads, so nothing the channel
holds is held while it does.

Every pull is checked for non-finite weights before the engine takes them (:meth:`RolloutWorker._pull`,
one norm per tensor: :func:`asyncrl.core.finite.first_bad_tensor`): weights a channel corrupted end
the run in one line naming the worker, the channel and the tensor, not as NaN logits and a sampler's
traceback.

On CUDA the rollout engines share the GPU with the trainer or have one of their own:
:func:`worker_engine_kwargs` gives vLLM its share of the memory, sized from what the device has free
once the staging copy is there and from the KV cache generation needs, and :func:`worker_gpu_share`
is the share of a GPU a Ray actor asks for.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from dataclasses import dataclass

import torch

from asyncrl.core.finite import BadTensor, first_bad_tensor
from asyncrl.core.errors import as_payload
from asyncrl.core.loader import ConfigError
from asyncrl.core.registries import BACKENDS, CHANNELS
from asyncrl.distributed.launcher_env import forget_launcher
from asyncrl.distributed.nccl_env import restore_env
from asyncrl.types import batch_from_numpy, batch_to_numpy
from asyncrl.runtime.engines import engine_sequences, vllm_sizes
from asyncrl.runtime.memory import rss_mb


@dataclass
class WorkUnit:
    """Generate ``n`` samples for each problem; rows are problems × n in order."""

    unit_id: int
    problem_indices: list[int]  # indices into the task's train split
    group_ids: list[int]
    n: int


@dataclass
class WorkerSpec:
    """Everything a worker needs to rebuild its world in a fresh process."""

    worker_id: int
    config: dict
    policy_dir: str
    seed: int
    chunk_tokens: int
    interruptible: bool
    cpu: int | None = None  # CPU to pin this process to, or None


def on_cuda(cfg) -> bool:
    return torch.device(cfg.policy.device).type == "cuda"


def worker_gpu_share(cfg) -> float:
    """GPUs one Ray rollout actor asks for: none off CUDA (Ray then hides every GPU from it), else
    ``async.gpus_per_worker``, or by default 1 / (n_workers + 1): the actors and the trainer (in the
    driver, which Ray does not count) on one GPU."""
    if not on_cuda(cfg):
        return 0.0
    return cfg.async_.gpus_per_worker or 1.0 / (cfg.async_.n_workers + 1)


def engines_beside_trainer(cfg) -> int:
    """Rollout engines on the trainer's GPU: every worker on CUDA, except Ray actors that ask for a
    whole GPU each (those get GPUs of their own)."""
    own_gpus = not BACKENDS[cfg.async_.backend].workers_on_trainer_gpu and worker_gpu_share(cfg) >= 1
    if not on_cuda(cfg) or own_gpus:
        return 0
    return cfg.async_.n_workers


def worker_engine_kwargs(cfg, staging: torch.nn.Module | None = None) -> dict:
    """``rollout.engine_kwargs`` for a rollout worker whose staging copy of the weights (``staging``,
    in the generation dtype) is already on its device. For vLLM on CUDA: the sizes of
    :func:`vllm_sizes`, and without a memory setting of the user's ``gpu_memory_utilization`` from
    what that device has free and what generation needs
    (:func:`asyncrl.rollout.vllm_memory.memory_share`), capped by the colocated share split among
    the engines beside the trainer, or by vLLM's own default on a GPU of its own."""
    kwargs = dict(cfg.rollout.engine_kwargs)
    if cfg.rollout.engine != "vllm" or not on_cuda(cfg):
        return kwargs
    from asyncrl.rollout.vllm_engine import COLOCATED_GPU_MEMORY, DEDICATED_GPU_MEMORY, MEMORY_KEYS

    if staging is None:
        raise ValueError("worker_engine_kwargs: vLLM's share on CUDA is sized from the staging copy on the device")
    kwargs = vllm_sizes(cfg, kwargs, staging.config)
    if MEMORY_KEYS & set(cfg.rollout.engine_kwargs):
        return kwargs  # the user's share, as given
    sharing = engines_beside_trainer(cfg)
    cap = COLOCATED_GPU_MEMORY / sharing if sharing else DEDICATED_GPU_MEMORY
    kwargs["gpu_memory_utilization"] = vllm_share(cfg, staging, kwargs, cap)
    return kwargs


def vllm_share(cfg, staging: torch.nn.Module, kwargs: dict, cap: float) -> float:
    """vLLM's fraction of the staging copy's device: weights as large as the staging copy, the KV
    cache of ``max_num_seqs`` (else a step's rows) × ``max_model_len`` (else the longest prompt +
    completion), and a ``collective`` channel's receive buffer (the staging copy's size again)."""
    from asyncrl.rollout import vllm_memory
    from asyncrl.runtime.channels import channel_name
    from asyncrl.runtime.engines import generation_dtype

    weights = sum(t.numel() * t.element_size() for t in staging.parameters())  # tied weights once
    device = next(staging.parameters()).device
    channel = channel_name(cfg.async_.weight_channel, cfg.async_.backend, cfg.policy.device)
    receive = weights if channel in CHANNELS and CHANNELS[channel].receive_buffer else 0
    shape = vllm_memory.kv_shape(staging.config, generation_dtype(cfg))
    default_seqs, default_positions = engine_sequences(cfg)
    seqs = int(kwargs.get("max_num_seqs") or default_seqs)
    positions = int(kwargs.get("max_model_len") or default_positions)
    need = vllm_memory.need(shape, weights, seqs, positions, int(kwargs.get("max_model_len") or shape.max_positions))
    return vllm_memory.memory_share(device, need, receive, cap)


def starts_alone(spec: WorkerSpec) -> bool:
    """Start this worker only once the one before it is ready: on CUDA, where an engine sizes its
    memory at start-up (vLLM profiles the free GPU memory) and must not see another one allocating."""
    return torch.device(spec.config["policy"]["device"]).type == "cuda"


def pin_to_cpu(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


class Heartbeat:
    """A worker process's sign of life for the pool's watchdog (``async.worker_timeout_s``): an
    ``("alive", id, None)`` message, at most every ``interval_s``. Sent by the generating thread
    itself, between decode chunks and before scoring, so a worker that is stopped or stuck sends none."""

    def __init__(self, result_q, worker_id: int, worker_timeout_s: float):
        self.result_q, self.worker_id = result_q, worker_id
        self.interval_s = min(5.0, worker_timeout_s / 4)
        self.last = time.monotonic()

    def __call__(self) -> None:
        if time.monotonic() - self.last >= self.interval_s:
            self.last = time.monotonic()
            self.result_q.put(("alive", self.worker_id, None))


class RolloutWorker:
    """The state of one rollout worker, wherever it runs. ``channel``: a WeightChannel."""

    on_progress = None  # a Heartbeat in a worker process: called between decode chunks and before scoring

    def __init__(self, spec: WorkerSpec, channel):
        from transformers.utils import logging as hf_logging

        from asyncrl.config import Config
        from asyncrl.core.loader import from_dict
        from asyncrl.policy.model import enable_tf32, load_policy, set_deterministic
        from asyncrl.rewards import RewardSet
        from asyncrl.rollout.rollouts import make_rollout
        from asyncrl.runtime.engines import generation_dtype, rollout_engine
        from asyncrl.runtime.validate import validate_run
        from asyncrl.tasks import configured_task

        torch.set_num_threads(1)
        hf_logging.disable_progress_bar()
        self.spec = spec
        self.channel = channel
        self.cfg = validate_run(from_dict(Config, spec.config))  # plugins imported, user code loaded, as the trainer's
        set_deterministic(self.cfg.run.deterministic)
        policy = self.cfg.policy
        if torch.device(policy.device).type == "cuda":
            enable_tf32()  # generation matmuls as in the trainer's process (sync mode generates there)
        # an engine that keeps its own weights (vLLM) reads them from this copy, on its own device
        model, self.tokenizer = load_policy(spec.policy_dir, policy.device, generation_dtype(self.cfg),
                                            attn_implementation=policy.attn_implementation)
        self.task = configured_task(self.cfg.task, need_eval=False)  # evaluation runs in the trainer
        # the reward functions (reward models too) load before the engine: an engine that sizes its
        # memory from what its device has free at start (vLLM) then leaves room for them
        self.rewards = RewardSet.from_config(self.cfg.reward, self.task)  # from the config's import paths, in this process
        self.cfg.rollout.engine_kwargs = worker_engine_kwargs(self.cfg, staging=model)  # with the copy in place
        self.engine = rollout_engine(self.cfg, model=model.eval(), tokenizer=self.tokenizer,
                                     policy_dir=spec.policy_dir, seed=spec.seed, chunked=spec.interruptible)
        # the module the channel fills: the engine's own model, else a staging copy
        self.landing = getattr(self.engine, "model", None) or model
        self.rollout = make_rollout(self.cfg, self.rewards, self.tokenizer)  # single turns or episodes
        self.problems = self.task.problems("train")
        self.pull_s = 0.0
        self._pull()

    def _pull(self) -> int:
        t0 = time.perf_counter()
        version = self.channel.pull(self.landing)
        self._check_pulled(version)
        self.engine.update_weights(self.landing, version)
        self.pull_s += time.perf_counter() - t0
        return version

    def _check_pulled(self, version: int) -> None:
        """Refuse weights that arrived holding NaN or inf (a fatal error: one line, exit 2)."""
        found = first_bad_tensor(self.landing.named_parameters())
        if found:
            from asyncrl.runtime.channels import channel_name

            name = channel_name(self.cfg.async_.weight_channel, self.cfg.async_.backend, self.cfg.policy.device)
            raise BadTensor(f"rollout worker {self.spec.worker_id} received non-finite weights through the {name} "
                            f"weight channel (version {version}: {found})", key="async.weight_channel")

    def run(self, unit: WorkUnit) -> dict:
        started = time.perf_counter()
        self.pull_s = 0.0
        updates = 0

        def between_chunks() -> bool:
            nonlocal updates
            if self.on_progress is not None:
                self.on_progress()
            if self.channel.latest() <= self.engine.version:
                return False
            self._pull()
            updates += 1
            return True

        if self.channel.latest() > self.engine.version:
            self._pull()
        chosen = [self.problems[i] for i in unit.problem_indices]
        out = self.rollout.run(self.engine, chosen, unit.n,
                               between_chunks=between_chunks if self.spec.interruptible else None)
        if self.on_progress is not None:
            self.on_progress()
        batch = out.batch
        ids = torch.tensor(unit.group_ids)
        batch.group_ids = ids[batch.group_ids]  # the unit's groups (0, 1, ...) as the run's group ids
        return {"unit_id": unit.unit_id, "batch": batch, "gen_time_s": time.perf_counter() - started,
                "weight_updates": updates, "weight_pull_s": self.pull_s, "episode_stats": out.stats,
                "failed_groups": [unit.group_ids[g] for g in out.failed_groups], "n": unit.n, "rss_mb": rss_mb()}


def worker_main(spec: WorkerSpec, channel, work_q, result_q, stop) -> None:
    """Process entry point, started by :func:`asyncrl.runtime.worker_entry.start_guarded`. Sends
    ("ready", id), ("alive", id) (a heartbeat), ("result", id, payload), ("fatal", id, the error as
    data: asyncrl.core.errors.as_payload) or ("error", id, text)."""
    try:
        parent = os.getppid()  # the trainer (worker_entry.start checked); watched where no death signal is
        forget_launcher()  # a worker of rank 0 under torchrun is not a rank of its job
        restore_env()  # the NCCL error handling the trainer's environment had before it set its own
        pin_to_cpu(spec.cpu)
        worker = RolloutWorker(spec, channel)
        worker.on_progress = Heartbeat(result_q, spec.worker_id, spec.config["async"]["worker_timeout_s"])
        result_q.put(("ready", spec.worker_id, None))
        running = lambda: not stop.is_set() and os.getppid() == parent  # noqa: E731
        if hasattr(worker.rollout, "play"):  # episodes: in flight across units, each group sent as it ends
            _serve_episodes(worker, work_q, result_q, running)
        while running():
            try:
                unit: WorkUnit = work_q.get(timeout=0.2)
            except queue.Empty:
                continue
            payload = worker.run(unit)
            payload["batch"] = batch_to_numpy(payload["batch"])
            result_q.put(("result", spec.worker_id, payload))
    except ConfigError as err:  # bad input (e.g. a reward that returns NaN): restarting cannot help
        result_q.put(("fatal", spec.worker_id, as_payload(err)))  # raised again in the trainer as its class
    except Exception:  # report, then die: the pool restarts us
        result_q.put(("error", spec.worker_id, traceback.format_exc()))
        raise


def _serve_episodes(worker: RolloutWorker, work_q, result_q, running) -> None:
    """The loop of a worker that plays episodes (:mod:`asyncrl.runtime.episode_stream`): take every
    unit admitted, advance the episodes, send each group that ended."""
    from asyncrl.runtime.episode_stream import EpisodeStream

    stream = EpisodeStream(worker)
    while running():
        while stream.accepts():
            try:
                unit = work_q.get_nowait() if stream.live else work_q.get(timeout=0.2)
            except queue.Empty:
                break
            stream.add(unit)
        for payload in stream.advance(timeout=0.05):
            payload["batch"] = batch_to_numpy(payload["batch"])
            result_q.put(("result", worker.spec.worker_id, payload))


class EpisodeThread:
    """:func:`_serve_episodes` in a daemon thread of this process, fed and drained through
    in-process queues: how a Ray actor, whose methods the trainer calls, keeps episodes in flight
    across units and hands each group over as it ends (a worker process runs the loop itself, on
    its process queues). ``add`` and ``take`` are called from other threads than the loop's."""

    def __init__(self, worker: RolloutWorker):
        self.work: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(worker,), name="asyncrl-episodes", daemon=True)
        self.thread.start()

    def _serve(self, worker: RolloutWorker) -> None:
        try:
            _serve_episodes(worker, self.work, self.results, lambda: not self.stopping.is_set())
        except BaseException as err:  # noqa: BLE001 (kept for take, which raises it in the caller)
            self.failure = err
            self.results.put(None)  # wakes a take that waits for a group

    def add(self, unit: WorkUnit) -> None:
        self.work.put(unit)

    def take(self, timeout_s: float) -> list[dict]:
        """The payloads of the groups that ended since the last take, waiting up to ``timeout_s``
        for the first; their batches as tensors again (the loop converts them for a process queue;
        ``torch.from_numpy`` shares the arrays' memory). Once the loop has died and every payload
        it sent is taken, its exception is raised."""
        items = []
        try:
            items.append(self.results.get(timeout=0 if self.failure is not None else timeout_s))
            while True:
                items.append(self.results.get_nowait())
        except queue.Empty:
            pass
        payloads = [item[2] for item in items if item is not None]
        if not payloads and self.failure is not None:
            raise self.failure
        for payload in payloads:
            payload["batch"] = batch_from_numpy(payload["batch"])
        return payloads

    def stop(self, timeout_s: float) -> None:
        """End the loop at its next turn; waits for it at most ``timeout_s`` (an environment's call
        may hold it longer: the thread is a daemon, it does not keep the process alive)."""
        self.stopping.set()
        self.thread.join(timeout_s)
