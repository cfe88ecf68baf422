"""Typed run configuration: one small dataclass per component, validated at load.

Load order: defaults ← ``--config FILE`` (YAML) ← ``dotted.key=value`` overrides. A section whose
dataclass has a ``name`` field accepts a bare string as shorthand (``task=arithmetic`` ≡
``task.name=arithmetic``). Every error is a :class:`ConfigError` whose message names the key.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from asyncrl.stability.config import (AdaptiveStalenessConfig, EssWarningConfig, VcpoConfig,
                                      check_combinations)
from asyncrl.config_loader import (
    ConfigError,
    apply_override,
    from_dict,
    merge,
    parse_override,
    read_yaml,
    to_dict,
)
from asyncrl.tasks import ArithmeticConfig


@dataclass
class RunConfig:
    """Where a run writes and how it reports."""

    out_dir: str = "runs"
    name: str | None = None  # run directory name; default: <mode>-<loss>-s<seed>-<timestamp>
    seed: int = 0
    mode: Literal["sync", "async", "simulated"] = "async"
    checkpoint_every: int = 0  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int = 2  # newest checkpoints kept in <run dir>/checkpoints/; 0 = all
    # no: a new run (an existing run dir is refused); auto: resume <out_dir>/<name> from its newest
    # checkpoint when it has one, else start it; must: resume or fail (`asyncrl train --resume DIR`)
    resume: Literal["no", "auto", "must"] = "no"
    checkpoint_on_signal: bool = True  # SIGTERM / SIGINT: checkpoint the last finished step, then exit
    tensorboard: bool = True
    progress: bool = True  # live progress line (rich); off for subprocesses that parse stdout
    # torch.use_deterministic_algorithms in the trainer and every worker: bitwise-reproducible GPU
    # runs, at some speed cost (CPU runs are bitwise reproducible without it)
    deterministic: bool = False

    def validate(self) -> None:
        if self.checkpoint_every < 0:
            raise ValueError("checkpoint_every: must be >= 0")
        if self.keep_checkpoints < 0:
            raise ValueError("keep_checkpoints: must be >= 0")
        if self.resume != "no" and self.name is None:
            raise ValueError("resume: needs run.name (the run directory to resume), or use --resume RUN_DIR")
        # a plain name: "..", "a/b" or an absolute path would write outside out_dir
        if self.name is not None and (any(c in self.name for c in "/\\\0")
                                      or self.name.strip() in ("", ".", "..")):
            raise ValueError(f"name: must be a plain directory name (not empty, '.' or '..'; no '/'), "
                             f"got {self.name!r}")


def _validate_device(device: str) -> None:
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"device: not a torch device: {device!r} (cpu, cuda, cuda:N)") from None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device: {device!r} is not supported (cpu, cuda, cuda:N)")


@dataclass
class ModelConfig:
    """Shape of the embedded tiny Qwen2-architecture model (ignored when policy.model_path is set)."""

    vocab_size: int = 1024
    hidden_size: int = 192
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 4
    intermediate_size: int = 512
    max_positions: int = 256
    # one token per digit, or let BPE merge frequent numbers into single tokens. Whole-number
    # tokens make copying an operand one lookup instead of several: the warm start learns ~3x faster
    split_digits: bool = False

    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1")
        if self.vocab_size < 300:
            raise ValueError("vocab_size: must be >= 300 (256 byte symbols + specials + merges)")
        if self.hidden_size % self.num_heads:
            raise ValueError("num_heads: must divide hidden_size")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_kv_heads: must divide num_heads")


@dataclass
class PolicyConfig:
    """Which weights to train and where they run."""

    model_path: str | None = None  # a local HF directory; None = the embedded tiny model (cached)
    device: str = "cpu"  # "cpu", "cuda" or "cuda:N": trainer, rollout workers and evaluation
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"  # the trained (master) weights
    torch_threads: int = 1  # 1 per process: 2 threads slow down many-fold when the other core is busy
    cache_dir: str = ".asyncrl_cache"
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template when it has one
    attn_implementation: str | None = None  # e.g. "sdpa", "eager", "flash_attention_2"; None = default
    gradient_checkpointing: bool = False
    # LoRA through peft (pip install "asyncrl[lora]"): only the adapters train; rollout workers and
    # checkpoints get the merged weights (docs/models.md). 0 = off (full fine-tuning)
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: list[str] | None = None  # None = peft's default for the architecture

    def validate(self) -> None:
        if self.torch_threads < 1:
            raise ValueError("torch_threads: must be >= 1")
        _validate_device(self.device)
        if self.lora_rank < 0:
            raise ValueError("lora_rank: must be >= 0 (0 = no LoRA)")
        if self.lora_alpha <= 0:
            raise ValueError("lora_alpha: must be > 0")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError("lora_dropout: must be in [0, 1)")
        if self.lora_target_modules is not None and (
                not self.lora_target_modules or not all(m.strip() for m in self.lora_target_modules)):
            raise ValueError("lora_target_modules: must be a non-empty list of module names, or null")
        if self.model_path is not None and not Path(self.model_path).is_dir():
            raise ValueError(f"model_path: no such directory: {self.model_path}")
        if self.model_path is not None and not (Path(self.model_path) / "config.json").is_file():
            raise ValueError(f"model_path: not a Hugging Face model directory (no config.json): {self.model_path}")


@dataclass
class PretrainConfig:
    """Supervised warm start of the embedded model on generated worked solutions."""

    steps: int = 300
    batch_size: int = 64
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    seed: int = 0
    # fraction of demonstrations that end "The answer is N." instead of "#### N": the warm start
    # then uses both styles, and the GSM8K-style reward accepts only one (see README)
    alt_style_frac: float = 0.5
    torch_threads: int = 2  # the warm start runs alone, before any worker exists: use both cores

    def validate(self) -> None:
        if self.steps < 0:
            raise ValueError("steps: must be >= 0")
        if self.torch_threads < 1:
            raise ValueError("torch_threads: must be >= 1")
        if not 0 <= self.alt_style_frac <= 1:
            raise ValueError("alt_style_frac: must be in [0, 1]")
        if self.batch_size < 1:
            raise ValueError("batch_size: must be >= 1")
        if not 0 < self.lr < 1:
            raise ValueError("lr: must be in (0, 1)")
        if self.weight_decay < 0:
            raise ValueError("weight_decay: must be >= 0")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps: must be >= 0")


@dataclass
class TaskConfig:
    """The dataset and its reward. ``arithmetic`` is embedded; ``gsm8k`` and ``math`` read local
    files (``path``; field meanings in docs/tasks.md) and score with math-verify."""

    name: Literal["arithmetic", "gsm8k", "math"] = "arithmetic"
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    path: str | None = None
    eval_path: str | None = None
    eval_fraction: float = 0.1
    question_field: str = "question"
    answer_field: str = "answer"
    prompt_template: str = "Question: {question}\nAnswer:"
    answer_format: Literal["auto", "gsm8k", "boxed", "raw"] = "auto"
    max_train: int | None = None
    max_eval: int | None = None
    reward_timeout_s: float = 5.0
    reward_workers: int = 1
    # prompts longer than this many tokens are refused at start-up, naming their file:line (a
    # 20 MB JSONL line otherwise loads and crash-loops the worker); prompt + rollout.max_new_tokens
    # must also fit the model's context (max_position_embeddings)
    max_prompt_tokens: int = 2048

    DATASET_FIELDS = ("path", "eval_path", "eval_fraction", "question_field", "answer_field",
                      "prompt_template", "answer_format", "max_train", "max_eval", "reward_timeout_s",
                      "reward_workers")

    def build(self):
        """The task, with its problems generated/loaded; a bad dataset raises ConfigError."""
        from asyncrl.tasks import build_task

        section = "task.arithmetic" if self.name == "arithmetic" else "task"
        try:
            task = build_task(self.name, self.params())
            task.problems("train"), task.problems("eval")
        except ValueError as err:
            raise ConfigError(section, str(err)) from None
        if not task.problems("eval"):  # evaluation would divide by zero mid-run
            field_ = ("task.arithmetic.n_eval" if self.name == "arithmetic" else
                      "task.max_eval" if self.max_eval == 0 else "task.eval_fraction")
            raise ConfigError(field_, "no eval problems (raise it, or set task.eval_path)")
        return task

    def params(self):
        """The config object ``build_task(name, ...)`` expects for this task."""
        if self.name == "arithmetic":
            return self.arithmetic
        from asyncrl.tasks.datasets import DatasetConfig

        return DatasetConfig(**{k: getattr(self, k) for k in self.DATASET_FIELDS})

    def validate(self) -> None:
        if self.max_prompt_tokens < 1:
            raise ValueError("max_prompt_tokens: must be >= 1")
        if self.name == "arithmetic":
            return
        if self.eval_path is None and self.eval_fraction == 0:
            raise ValueError("eval_fraction: must be > 0 when task.eval_path is not set (no eval problems)")
        if self.path is None:
            raise ValueError(f"path: task {self.name!r} reads a local file; set task.path=<jsonl|parquet|dir>")
        self.params()  # DatasetConfig validates every field ("field: message")
        for name in ("path", "eval_path"):
            value = getattr(self, name)
            if value is not None and not Path(value).exists():
                raise ValueError(f"{name}: no such file or directory: {value}")


@dataclass
class RolloutConfig:
    """Sampling: each step draws ``prompts_per_step`` problems and ``samples_per_prompt`` answers each."""

    prompts_per_step: int = 8
    samples_per_prompt: int = 8
    max_new_tokens: int = 48
    temperature: float = 1.0
    # generation engine: "transformers" (embedded default) or "vllm" (pip install "asyncrl[vllm]";
    # docs/models.md); vllm_kwargs go to vllm.LLM (e.g. gpu_memory_utilization, max_model_len)
    engine: str = "transformers"  # a key of asyncrl.rollout.ENGINES
    vllm_kwargs: dict[str, Any] = field(default_factory=dict)
    # dtype of the generation weights; "auto" = policy.dtype. bfloat16 on a GPU halves the weight
    # traffic of decoding (the behavior log-probs are then those of the bf16 weights)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"

    def validate(self) -> None:
        from asyncrl.rollout.engine import ENGINES

        if self.engine not in ENGINES:
            raise ValueError(f"engine: unknown {self.engine!r} (known: {', '.join(sorted(ENGINES))})")
        if self.prompts_per_step < 1:
            raise ValueError("prompts_per_step: must be >= 1")
        if self.samples_per_prompt < 2:
            raise ValueError("samples_per_prompt: must be >= 2 (group-normalized advantages)")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens: must be >= 1")
        if not self.temperature > 0:
            raise ValueError("temperature: must be > 0")

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt


@dataclass
class LossConfig:
    """Which objective (a key of ``asyncrl.objectives.LOSSES``) and its hyperparameters."""

    name: str = "decoupled"
    params: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        from asyncrl.objectives import LOSSES, loss_param_names, validate_loss_params

        if self.name not in LOSSES:
            raise ValueError(f"name: unknown loss {self.name!r} (known: {', '.join(sorted(LOSSES))})")
        known = loss_param_names(self.name)
        for key in self.params:
            if key not in known:
                raise ValueError(f"params.{key}: not a parameter of loss {self.name!r} "
                                 f"(known: {', '.join(sorted(known))})")
        try:
            validate_loss_params(self.name, self.params)
        except ValueError as err:
            raise ValueError(f"params: {err}") from None


@dataclass
class TrainerConfig:
    """Optimization: one training step = one batch, ``n_minibatches`` AdamW updates, version += 1."""

    steps: int = 200
    lr: float = 3e-5
    weight_decay: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    grad_clip: float = 1.0
    n_minibatches: int = 4
    advantage: Literal["grpo", "drgrpo", "rloo"] = "grpo"
    adv_eps: float = 1e-6
    # proximal policy of decoupled objectives: "recompute" = one no-grad forward pass per step;
    # "loglinear" (A-3PO) / "linear" / "behav" = approximate_prox_logp per minibatch; "none" = pass no
    # prox_logp (coupled PPO; the REINFORCE "bypass" form of tis/mis)
    prox: Literal["behav", "recompute", "loglinear", "linear", "none"] = "loglinear"
    # mixed precision: forward passes under torch.autocast in this dtype, master weights and the
    # optimizer in policy.dtype. "bfloat16" is the usual GPU setting; "none" = full precision
    autocast: Literal["none", "bfloat16", "float16"] = "none"
    vcpo: VcpoConfig = field(default_factory=VcpoConfig)  # ESS-scaled lr, OPOB (docs/stability.md)
    ess_warning: EssWarningConfig = field(default_factory=EssWarningConfig)

    def validate(self) -> None:
        if self.steps < 0:
            raise ValueError("steps: must be >= 0")
        if not 0 < self.lr < 1:
            raise ValueError("lr: must be in (0, 1)")
        if self.grad_clip <= 0:
            raise ValueError("grad_clip: must be > 0")
        if self.weight_decay < 0:
            raise ValueError("weight_decay: must be >= 0")
        if self.n_minibatches < 1:
            raise ValueError("n_minibatches: must be >= 1")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}: must be in [0, 1)")
        if self.adv_eps <= 0:
            raise ValueError("adv_eps: must be > 0")


@dataclass
class EvalConfig:
    """Held-out evaluation: accuracy (mean reward) on ``n_problems`` eval-split problems."""

    every: int = 50  # steps between evals; 0 = only before and after training
    n_problems: int = 200
    samples: int = 4  # completions per problem: accuracy = mean reward over all of them
    # 1.0 = one sample per problem at the rollout temperature (the "eval reward" of the A-3PO
    # paper); 0 = greedy
    temperature: float = 1.0
    batch_size: int = 128

    def validate(self) -> None:
        if self.every < 0:
            raise ValueError("every: must be >= 0")
        if self.n_problems < 1:
            raise ValueError("n_problems: must be >= 1")
        if self.samples < 1:
            raise ValueError("samples: must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature: must be >= 0")
        if self.batch_size < 1:
            raise ValueError("batch_size: must be >= 1")


@dataclass
class AsyncConfig:
    """Asynchronous rollout (``run.mode=async``) and simulated lag (``run.mode=simulated``)."""

    backend: Literal["local", "ray"] = "local"
    # how weights reach the workers: "auto" = Ray's object store on the ray backend, CUDA IPC
    # (a flat GPU buffer, device-to-device copies) when policy.device is cuda, else host shared memory
    weight_channel: str = "auto"  # "auto" or a key of asyncrl.runtime.channels.CHANNELS
    n_workers: int = 1  # rollout worker processes (each uses 1 torch thread)
    max_staleness: int = 4  # K: admission bound and drop-at-consumption bound, in versions
    # W: batches the generator may start beyond the one the trainer takes next; None = K (AReaL's
    # rule). With generation faster than training, data arrive ~W versions stale; W = 1 already
    # keeps the trainer busy then (measured: same wall time as W = K, eval reward 1 point below sync
    # instead of 11; docs/runtime.md). Capped at K.
    max_ahead: int | None = 1
    interruptible: bool = True  # pick up new weights between decode chunks
    chunk_tokens: int = 8  # decode chunk between weight checks
    unit_prompts: int | None = None  # prompts per work unit; None = prompts_per_step / n_workers
    recency_decay: float = 1.0  # sample groups ∝ decay^age; 1 = FIFO
    hard_sync_every: int = 0  # every M steps drop all data older than the current version; 0 = off
    worker_start_timeout_s: float = 300.0
    # pin the trainer to CPU 0 and worker i to CPU 1 + i (when there are enough CPUs): keeps the
    # scheduler from migrating the two busy processes onto one core
    pin_cpus: bool = True
    # simulated mode: batch k comes from version k − lag, or (policy_buffer = N > 0) from a version
    # drawn uniformly from the last N (the VACO setup)
    lag: int = 0
    policy_buffer: int = 0
    adaptive: AdaptiveStalenessConfig = field(default_factory=AdaptiveStalenessConfig)  # ESS-governed W

    def validate(self) -> None:
        from asyncrl.runtime.channels import CHANNELS

        if self.weight_channel != "auto" and self.weight_channel not in CHANNELS:
            raise ValueError(f"weight_channel: unknown {self.weight_channel!r} "
                             f"(known: auto, {', '.join(sorted(CHANNELS))})")
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
        if self.worker_start_timeout_s <= 0:
            raise ValueError("worker_start_timeout_s: must be > 0")


@dataclass
class Config:
    run: RunConfig = field(default_factory=RunConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    task: TaskConfig = field(default_factory=TaskConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    async_: AsyncConfig = field(default_factory=AsyncConfig)

    def validate(self) -> None:
        if self.rollout.batch_size % self.trainer.n_minibatches:
            raise ValueError(
                f"trainer.n_minibatches: must divide the batch size "
                f"{self.rollout.batch_size} (= rollout.prompts_per_step × samples_per_prompt)")
        unit = self.async_.unit_prompts
        if unit is not None and self.rollout.prompts_per_step % unit:
            raise ValueError("async.unit_prompts: must divide rollout.prompts_per_step")
        if self.async_.lag and self.async_.policy_buffer:
            raise ValueError("async.lag: set either lag or policy_buffer, not both")
        channel, backend = self.async_.weight_channel, self.async_.backend
        if (channel == "ray") != (backend == "ray") and channel != "auto":
            raise ValueError(f"async.weight_channel: {channel!r} does not work with async.backend={backend!r}")
        check_combinations(self)
        if channel == "cuda" and not self.policy.device.startswith("cuda"):
            raise ValueError(f"async.weight_channel: 'cuda' needs policy.device=cuda, got {self.policy.device!r}")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def _sections_with_name() -> set[str]:
    return {f.name for f in dataclasses.fields(Config)
            if any(sf.name == "name" for sf in dataclasses.fields(f.default_factory()))}


def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Defaults ← YAML file ← overrides; raises ConfigError (one line naming the key)."""
    data: dict[str, Any] = read_yaml(path) if path else {}
    named = _sections_with_name()
    for text in overrides:
        parts, value = parse_override(text)
        if len(parts) == 1 and parts[0] in named and isinstance(value, str):
            parts = [parts[0], "name"]
        if isinstance(value, dict):
            value = merge({}, value)
        apply_override(data, parts, value)
    return from_dict(Config, data)


__all__ = [
    "Config", "ConfigError", "EvalConfig", "LossConfig", "ModelConfig", "PolicyConfig",
    "PretrainConfig", "RolloutConfig", "RunConfig", "TaskConfig", "TrainerConfig", "load_config",
]
