"""Where batches come from in async and simulated modes: ``async.*``."""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncrl.config.parts import AdaptiveStalenessConfig
from asyncrl.core.loader import setting
from asyncrl.core.registries import BACKENDS, CHANNELS


@dataclass
class AsyncConfig:
    """Asynchronous rollout (``run.mode=async``) and simulated lag (``run.mode=simulated``)."""

    backend: str = setting(
        "local", "where rollout workers run: local processes, Ray actors, or a plugin's "
                 "(asyncrl.core.registries.BACKENDS)", names=BACKENDS)
    # CUDA IPC = a flat GPU buffer, device-to-device copies
    weight_channel: str = setting(
        "auto", "how weights reach workers: auto (ray store / CUDA IPC / shared memory) or a key of "
                "asyncrl.core.registries.CHANNELS", names=CHANNELS, also=("auto",))
    n_workers: int = setting(1, "rollout worker processes (each uses 1 torch thread)")
    max_staleness: int = setting(4, "K: admission bound and drop-at-consumption bound, in versions")
    # With generation faster than training, data arrive ~W versions stale; W = 1 already keeps the
    # trainer busy then (measured: same wall time as W = K, eval reward 1 point below sync instead
    # of 11; docs/runtime.md)
    max_ahead: int | None = setting(
        1, "W: batches the generator may run ahead of the trainer (capped at K); null = K (AReaL)")
    interruptible: bool = setting(True, "workers pick up new weights between decode chunks")
    chunk_tokens: int = setting(8, "decode chunk between weight checks, in tokens")
    unit_prompts: int | None = setting(None, "prompts per work unit; null = prompts_per_step / n_workers")
    recency_decay: float = setting(1.0, "sample buffered groups with weight decay^age; 1 = oldest first (by oldest trained token)")
    hard_sync_every: int = setting(0, "every M steps drop all data older than the current version; 0 = off")
    worker_start_timeout_s: float = setting(
        0.0, "seconds a rollout worker may take to start; 0 = the engine's own bound (300 s; vLLM on CUDA, "
             "whose start-up profiles memory and captures CUDA graphs: 1200 s)")
    # above reward.timeout_s (default 300): a slow reward is then named by the reward's own timeout
    worker_timeout_s: float = setting(
        600.0, "local backend: seconds a rollout worker holding work may go without sending anything "
               "(a result, or its heartbeat between decode chunks) before it is killed and restarted")
    gpus_per_worker: float = setting(
        0.0, "Ray backend, policy.device cuda: GPUs each rollout actor asks Ray for; 0 = auto, "
             "1 / (n_workers + 1): every actor beside the trainer on one GPU")
    # each buffer is a flat copy of the weights on the trainer's GPU (14 GiB at 7B in bf16)
    channel_buffers: int = setting(
        0, "collective channel: weight buffers on the trainer's device at most; a publish that finds "
           "them all held by sends waits for one to finish; 0 = n_workers + 1 (never waits)")
    # keeps the scheduler from migrating the two busy processes onto one core; a vLLM worker is left
    # unpinned: it compiles with many threads at start-up and drives a GPU, one core would slow it
    pin_cpus: bool = setting(True, "pin the trainer to CPU 0 and worker i to CPU 1 + i (when enough CPUs; "
                                   "local backend; never with rollout.engine=vllm)")
    lag: int = setting(0, "simulated mode: batch k comes from policy version k - lag")
    policy_buffer: int = setting(
        0, "simulated mode: N > 0 = a version drawn uniformly from the last N (the VACO setup)")
    # the K + 1 past versions of simulated mode, each one model in rollout.dtype
    snapshots_on_host: bool = setting(
        False, "simulated mode: keep the past versions in host memory (pinned on CUDA), not on the device")
    adaptive: AdaptiveStalenessConfig = field(default_factory=AdaptiveStalenessConfig)  # ESS-governed W

    def validate(self) -> None:
        if self.n_workers < 1:
            raise ValueError("n_workers: must be >= 1")
        if self.max_staleness < 0:
            raise ValueError("max_staleness: must be >= 0")
        if self.max_ahead is not None and self.max_ahead < 0:
            raise ValueError("max_ahead: must be >= 0")
        if self.chunk_tokens < 1:
            raise ValueError("chunk_tokens: must be >= 1")
        if self.unit_prompts is not None and self.unit_prompts < 1:
            raise ValueError("unit_prompts: must be >= 1")
        if not 0 < self.recency_decay <= 1:
            raise ValueError("recency_decay: must be in (0, 1]")
        for name in ("hard_sync_every", "lag", "policy_buffer"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0")
        if self.worker_start_timeout_s < 0:
            raise ValueError("worker_start_timeout_s: must be >= 0 (0 = the engine's own bound)")
        if self.worker_timeout_s <= 0:
            raise ValueError("worker_timeout_s: must be > 0")
        if self.channel_buffers < 0 or self.channel_buffers == 1:
            raise ValueError("channel_buffers: must be 0 (n_workers + 1) or >= 2 (one published while one "
                             "is written)")
        if self.gpus_per_worker < 0:
            raise ValueError("gpus_per_worker: must be >= 0 (0 = auto)")
