"""Generation, objective, optimisation and evaluation: ``rollout.*``, ``loss.*``, ``trainer.*``,
``eval.*``."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal

from asyncrl.config.parts import EssWarningConfig, FsdpConfig, VcpoConfig
from asyncrl.core.loader import setting
from asyncrl.core.registries import ENGINES


def _check_truncation(top_p: float, top_k: int) -> None:
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p: must be in (0, 1] (1 = off), got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k: must be >= 0 (0 = off), got {top_k}")


@dataclass
class RolloutConfig:
    """Sampling: each step draws ``prompts_per_step`` problems and ``samples_per_prompt`` answers each."""

    prompts_per_step: int = setting(8, "prompts (groups) per training batch")
    samples_per_prompt: int = setting(8, "completions per prompt (the group of group-normalized advantages)")
    # TRL counts a batch in completions (generation_batch_size): this spares its users the division
    completions_per_step: int | None = setting(
        None, "completions per training batch, instead of prompts_per_step: prompts_per_step = this / "
              "samples_per_prompt (a multiple of it); null = prompts_per_step × samples_per_prompt")
    max_new_tokens: int = setting(48, "completion length limit in tokens")
    temperature: float = setting(1.0, "sampling temperature of the rollouts")
    # behav_logp stays the log-prob under the full softmax at the temperature (docs/tasks.md)
    top_p: float = setting(1.0, "nucleus sampling: smallest token set with this much probability; 1 = off")
    top_k: int = setting(0, "sample among the k most likely tokens; 0 = off")
    # vLLM's processed log-probs are those of the truncated, renormalized distribution
    allow_truncated_logprobs: bool = setting(
        False, "rollout.engine=vllm with top_p < 1 or top_k > 0: accept behavior log-probs of the truncated "
               "distribution, which the trainer compares with the full one (the ratios are biased)")
    # vllm: pip install "asyncrl[vllm]" (docs/models.md)
    engine: str = setting("transformers", "generation engine: transformers, vllm, or a plugin's "
                                          "(asyncrl.core.registries.ENGINES)", names=ENGINES)
    engine_kwargs: dict[str, Any] = setting(
        help="keyword arguments of the engine's constructor (vllm: those of vllm.LLM, e.g. "
             "gpu_memory_utilization, max_model_len); old name: vllm_kwargs", factory=dict)
    # bfloat16 on a GPU halves the weight traffic of decoding (the behavior log-probs are then
    # those of the bf16 weights)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting(
        "auto", "dtype of the generation weights; auto = policy.dtype (with vLLM on CUDA and float32 weights: "
                "bfloat16)")

    def validate(self) -> None:
        if self.prompts_per_step < 1:
            raise ValueError("prompts_per_step: must be >= 1")
        if self.samples_per_prompt < 2:
            raise ValueError("samples_per_prompt: must be >= 2 (group-normalized advantages)")
        if self.completions_per_step is not None:
            self._prompts_from_completions()
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens: must be >= 1")
        if not self.temperature > 0:
            raise ValueError("temperature: must be > 0")
        _check_truncation(self.top_p, self.top_k)
        self._check_truncated_logprobs()

    def _check_truncated_logprobs(self) -> None:
        """vLLM records the log-probs of the distribution it samples from, truncated by top_p / top_k,
        while the trainer's are of the full one; the transformers engine records the full one."""
        truncated = [f"{key}={getattr(self, key)}" for key, off in (("top_p", 1.0), ("top_k", 0))
                     if getattr(self, key) != off]
        if self.engine == "vllm" and truncated and not self.allow_truncated_logprobs:
            raise ValueError(f"{truncated[0].partition('=')[0]}: {' and '.join(truncated)} with rollout.engine=vllm "
                             "records behavior log-probs of the truncated distribution, the trainer's are of the "
                             "full one (biased ratios); set top_p=1 and top_k=0, use rollout.engine=transformers, "
                             "or set rollout.allow_truncated_logprobs=true to accept the bias")

    def _prompts_from_completions(self) -> None:
        """``completions_per_step`` sets ``prompts_per_step`` when that is at its default (8); any
        other value of it must agree (a preset's, or one given beside it)."""
        total, group = self.completions_per_step, self.samples_per_prompt
        if total < group or total % group:
            raise ValueError(f"completions_per_step: {total} is not a whole number of groups of "
                             f"rollout.samples_per_prompt={group} (try {max(1, round(total / group)) * group})")
        prompts = total // group
        default = next(f.default for f in fields(self) if f.name == "prompts_per_step")
        if self.prompts_per_step not in (prompts, default):
            raise ValueError(f"completions_per_step: {total} completions are {prompts} prompts × {group}, but "
                             f"rollout.prompts_per_step={self.prompts_per_step} (given beside it, or by the "
                             "--config file); give only one of the two")
        self.prompts_per_step = prompts

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt


@dataclass
class LossConfig:
    """Which objective (a key of ``asyncrl.objectives.LOSSES``) and its hyperparameters."""

    name: str = setting("decoupled", "objective: a key of asyncrl.objectives.LOSSES, a plugin's included "
                                     "(docs/objectives.md)", names="asyncrl.objectives:LOSSES")
    params: dict[str, Any] = setting(
        help="the objective's hyperparameters, e.g. loss.params.eps_high=0.28; {} = its defaults", factory=dict)

    # the name and the params are the loss's to check: asyncrl.runtime.validate asks its entry


@dataclass
class TrainerConfig:
    """Optimization: one training step = one batch, ``n_minibatches`` AdamW updates, version += 1."""

    steps: int = setting(200, "training steps (batches); each bumps the policy version")
    lr: float = setting(3e-5, "AdamW learning rate")
    weight_decay: float = setting(0.0, "AdamW weight decay")
    beta1: float = setting(0.9, "AdamW beta1")
    beta2: float = setting(0.999, "AdamW beta2")
    grad_clip: float = setting(1.0, "max global gradient norm per update")
    n_minibatches: int = setting(4, "optimizer updates per batch (must divide the batch size)")
    # memory, not the update: a minibatch runs as several forward/backward passes whose gradients add up
    micro_batch_size: int = setting(
        0, "sequences per forward/backward (gradient accumulation; the update equals the whole "
           "minibatch's); 0 = the whole minibatch")
    logits_chunk: int = setting(1024, "token positions per LM-head chunk (memory of the head ~ chunk x vocabulary)")
    advantage: Literal["grpo", "drgrpo", "rloo"] = setting(
        "grpo", "grpo: (r - mean) / std per group; drgrpo: r - mean; rloo: leave-one-out baseline")
    adv_eps: float = setting(1e-6, "added to the group std in grpo advantages")
    # a key of asyncrl.objectives.PROX_STRATEGIES; "none" = the loss's coupled form (the REINFORCE
    # "bypass" form of tis/mis). Its params, and which ones go with the loss: asyncrl.runtime.validate
    prox: str = setting(
        "loglinear", "proximal policy: recompute (extra forward), loglinear (A-3PO), linear, behav, none "
                     "(coupled) (asyncrl.objectives.PROX_STRATEGIES)", names="asyncrl.objectives:PROX_STRATEGIES")
    prox_params: dict[str, Any] = setting(
        help="the proximal strategy's parameters, e.g. trainer.prox_params.alpha_min=0.125 for "
             "loglinear_floor or .ess_target for loglinear_ess; {} = its defaults", factory=dict)
    prox_error: bool = setting(
        False, "also compute the exact proximal log-probs (one extra forward pass per step, as recompute) "
               "and log the approximation's error |exact - approx| per token: prox_abs_err_{mean,max}")
    prox_error_every: int = setting(
        1, "with prox_error: measure on steps whose version is a multiple of N only, so a timed run "
           "pays about 1/N of the extra pass")
    # master weights and the optimizer stay in policy.dtype; bfloat16 is the usual GPU setting;
    # float16 adds a dynamic loss scale (torch.amp.GradScaler)
    autocast: Literal["none", "bfloat16", "float16"] = setting(
        "none", "mixed precision: forward passes under torch.autocast in this dtype (float16 with a "
                "dynamic loss scale); none = full")
    vcpo: VcpoConfig = field(default_factory=VcpoConfig)  # ESS-scaled lr, OPOB (docs/stability.md)
    ess_warning: EssWarningConfig = field(default_factory=EssWarningConfig)
    fsdp: FsdpConfig = field(default_factory=FsdpConfig)  # several trainer ranks (torchrun; docs/scaling.md)
    # learning-rate schedule over trainer.steps (asyncrl.training.lr_schedule; docs/training.md): linear
    # warm-up from 0 over warmup_steps, then constant / linear / cosine decay to min_lr_ratio · lr
    lr_schedule: Literal["constant", "linear", "cosine"] = setting(
        "constant", "learning-rate decay after the warm-up: constant, linear or cosine")
    warmup_steps: int = setting(0, "steps of linear learning-rate warm-up from 0")
    min_lr_ratio: float = setting(0.0, "linear / cosine decay ends at min_lr_ratio · lr")
    # KL penalty to the frozen starting policy (asyncrl.training.reference): loss += kl_coef · token-mean KL
    # estimate; 0 = off (no reference model is loaded)
    kl_coef: float = setting(0.0, "weight of the KL penalty to the starting policy; 0 = off")
    kl_estimator: Literal["k1", "k2", "k3"] = setting("k3", "KL estimator of the penalty (k3 = low-variance)")

    def validate(self) -> None:
        if self.steps < 0:
            raise ValueError("steps: must be >= 0")
        if not 0 < self.lr < 1:
            raise ValueError("lr: must be in (0, 1)")
        if self.grad_clip <= 0:
            raise ValueError("grad_clip: must be > 0")
        if self.prox_error_every < 1:
            raise ValueError("prox_error_every: must be >= 1")
        if self.weight_decay < 0:
            raise ValueError("weight_decay: must be >= 0")
        if self.n_minibatches < 1:
            raise ValueError("n_minibatches: must be >= 1")
        if self.micro_batch_size < 0:
            raise ValueError("micro_batch_size: must be >= 0 (0 = the whole minibatch)")
        if self.logits_chunk < 1:
            raise ValueError("logits_chunk: must be >= 1")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name}: must be in [0, 1)")
        if self.adv_eps <= 0:
            raise ValueError("adv_eps: must be > 0")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps: must be >= 0")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError("min_lr_ratio: must be in [0, 1]")
        if self.kl_coef < 0:
            raise ValueError("kl_coef: must be >= 0 (0 = no KL penalty)")


@dataclass
class EvalConfig:
    """Held-out evaluation: accuracy (mean reward) on ``n_problems`` eval-split problems."""

    every: int = setting(50, "steps between evals; 0 = only before and after training")
    n_problems: int = setting(200, "eval-split problems scored; 0 = no evaluation (the task needs no eval split)")
    samples: int = setting(4, "completions per problem: accuracy = mean reward over all of them")
    # 1.0 with one sample per problem is the "eval reward" of the A-3PO paper
    temperature: float = setting(1.0, "sampling temperature of evaluation; 0 = greedy")
    top_p: float = setting(1.0, "nucleus sampling of evaluation; 1 = off")
    top_k: int = setting(0, "top-k sampling of evaluation; 0 = off")
    batch_size: int = setting(128, "prompts generated at once during evaluation")
    # unbiased pass@k over the samples (a sample passes with reward >= 1); each k <= samples
    pass_k: list[int] = setting(help="k values of the unbiased pass@k (each <= samples)", factory=lambda: [1])
    greedy: bool = setting(False, "also one temperature-0 answer per problem: eval_greedy_reward, its mean reward")
    # lock-step by default: the batches of "ready" follow the environments' timing, so two
    # evaluations of one start would differ by sampling noise
    schedule: Literal["rounds", "ready"] = setting(
        "rounds", "evaluation episodes (env.*): rounds (lock-step, the same result every time) or ready "
                  "(as env.schedule=ready: never waits for the slowest environment, not reproducible)")
    # benchmark cells share a warm start and seed: their step-0 evaluations are one computation
    cache_initial: bool = setting(
        False, "reuse the evaluation before training of an identical start (weights, problems, eval "
               "settings, seed) from policy.cache_dir/initial-eval")
    # per-problem file: prompt, answer, completions, rewards, pass@k flags
    outputs: str | None = setting(
        None, "asyncrl eval: directory for eval.json and problems.jsonl; null = print only")

    def validate(self) -> None:
        if self.every < 0:
            raise ValueError("every: must be >= 0")
        samples = 1 if self.temperature == 0 else self.samples  # greedy sampling: one answer each
        bad = [k for k in self.pass_k if not 1 <= k <= samples]
        if not self.pass_k or bad:
            raise ValueError(f"pass_k: each k must be in [1, {samples}] (the samples per problem"
                             f"{' at temperature 0' if self.temperature == 0 else ''}), got {self.pass_k}")
        if self.n_problems < 0:
            raise ValueError("n_problems: must be >= 0 (0: the run does not evaluate)")
        if self.samples < 1:
            raise ValueError("samples: must be >= 1")
        if self.temperature < 0:
            raise ValueError("temperature: must be >= 0")
        _check_truncation(self.top_p, self.top_k)
        if self.batch_size < 1:
            raise ValueError("batch_size: must be >= 1")
