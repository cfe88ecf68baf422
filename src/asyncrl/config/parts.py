"""The settings sections that belong to one part each (the stability machinery, the sharded
trainer, the embedded and file tasks, reasoning-gym, GEM): plain dataclasses the run config nests or
inherits. They live here, below every part, so that config imports no part; each part re-exports its
own (``asyncrl.stability.config.VcpoConfig``, ``asyncrl.tasks.ArithmeticConfig``, ...)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from asyncrl.core.loader import setting

MAX_STEPS_LIMIT = 64  # task.arithmetic.max_steps at most
MUL_FACTORS = (2, 9)  # the factor of a task.arithmetic '*' step: in [2, 9]

# -- the stability machinery (asyncrl.stability) --------------------------------------------------


@dataclass
class VcpoConfig:
    """VCPO's trainer-side fixes (``trainer.vcpo``). Defaults are the VCPO authors'.

    enabled: scale each optimizer step's learning rate by the ESS rule
        lr · rule(min(1, ρ_ess / base_ess_ratio)), ρ_ess = ESS / B of the minibatch's sequence
        importance weights (behavior → current policy).
    opob: replace the group-mean baseline of the advantages by the off-policy optimal baseline
        b* = Σ w² ‖g‖² R / Σ w² ‖g‖² per prompt group (costs one extra forward and backward pass per
        sequence, to get each sequence's score-gradient norm ‖g‖).
    """

    enabled: bool = setting(False, "scale each update's learning rate by the ESS rule (VCPO)")
    base_ess_ratio: float = setting(1.0, "ρ_base: the on-policy reference ESS fraction")
    rule: Literal["sqrt", "linear"] = setting("sqrt", "lr factor: rule(min(1, ESS fraction / base_ess_ratio))")
    weight_cap: float = setting(0.0, '> 0: ESS of min(w, cap) (VCPO\'s "use_clipped"); 0 = unclipped weights')
    opob: bool = setting(False, "off-policy optimal baseline instead of the group mean (VCPO)")

    def validate(self) -> None:
        if not (math.isfinite(self.base_ess_ratio) and 0 < self.base_ess_ratio <= 1):
            raise ValueError("base_ess_ratio: must be in (0, 1]")
        if not (math.isfinite(self.weight_cap) and self.weight_cap >= 0):
            raise ValueError("weight_cap: must be a finite number >= 0 (0 = no cap)")
        if 0 < self.weight_cap < 1:
            raise ValueError("weight_cap: a cap below 1 would clip on-policy weights; use >= 1 or 0")


@dataclass
class EssWarningConfig:
    """ESS early warning (``trainer.ess_warning``): flags the run when the step's ESS fraction stays
    below ``threshold`` for ``window`` consecutive steps. ``action``: ``warn`` (flag only), ``stop``
    (checkpoint and end the run there), ``rollback`` (reload the newest checkpoint saved before the
    ESS fell, and go on with fresh data)."""

    threshold: float = setting(0.0, "flag a run whose ESS fraction stays below this; 0 = off")
    window: int = setting(3, "consecutive low-ESS steps that trigger the warning")
    action: Literal["warn", "stop", "rollback"] = setting(
        "warn", "warn: flag only; stop: checkpoint and end; rollback: reload the checkpoint before the fall")

    def validate(self) -> None:
        if not (math.isfinite(self.threshold) and 0 <= self.threshold <= 1):
            raise ValueError("threshold: must be an ESS fraction in [0, 1] (0 = off)")
        if self.window < 1:
            raise ValueError("window: must be >= 1")


@dataclass
class AdaptiveStalenessConfig:
    """ESS-governed look-ahead (``async.adaptive``), W = ``async.max_ahead`` moved by one per step:
    down (to 0) after a step whose ESS fraction is below ``lower_below``; up (to K =
    ``async.max_staleness``) after one in which the trainer waited for more than ``starved_frac`` of
    the step and the ESS fraction is above ``raise_above``; down (to ``min_window``) after one in
    which it did not wait. W settles at the smallest look-ahead that keeps the trainer fed."""

    enabled: bool = setting(False, "move async.max_ahead by one per step, governed by the ESS")
    lower_below: float = setting(0.5, "lower W after a step whose ESS fraction is below this")
    raise_above: float = setting(0.8, "raise W (trainer starved) only while the ESS fraction is above this")
    starved_frac: float = setting(0.05, 'the trainer "waited" when its batch wait exceeds this share of the step')
    min_window: int = setting(1, "the floor of W when the trainer is fed; only a low ESS takes W below it")

    def validate(self) -> None:
        for name in ("lower_below", "raise_above"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name}: must be an ESS fraction in [0, 1]")
        if self.lower_below > self.raise_above:
            raise ValueError("lower_below: must be <= raise_above")
        if not (math.isfinite(self.starved_frac) and 0 <= self.starved_frac < 1):
            raise ValueError("starved_frac: must be a share of the step in [0, 1)")
        if self.min_window < 0:
            raise ValueError("min_window: must be >= 0")


# -- the sharded trainer (asyncrl.distributed) ---------------------------------------------------


@dataclass
class FsdpConfig:
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) on every decoder layer, then the root.

    reshard_after_forward: free each layer's gathered parameters after its forward pass (less memory,
        one more all-gather in the backward pass); false keeps them until the backward pass.
    param_dtype: the dtype layers compute in (``bfloat16``: FSDP casts the gathered parameters; the
        shards, gradients' reduction and the optimizer stay float32); ``none``: the policy's dtype;
        ``auto`` (:func:`gather_dtype`): bfloat16 on CUDA when ``trainer.autocast=bfloat16`` (the
        layers compute in bf16 there anyway, so gathering float32 only costs memory and bandwidth:
        at 7B the gathered root and two layers hold 2.9 instead of 5.8 GiB a rank), none otherwise
        (the CPU, float32 or float16 compute).
    cpu_offload: keep parameter shards, gradients and optimizer state in host memory.
    timeout_s: the longest a collective waits for a rank that does not join it, and how long a wait
        outside collectives (for rank 0's next command, for the others to load the model) goes on
        after the awaited rank's heartbeat stops (asyncrl.distributed.liveness).
    """

    reshard_after_forward: bool = setting(True, "free gathered layer parameters after their forward pass")
    param_dtype: Literal["auto", "none", "bfloat16"] = setting(
        "auto", "compute dtype of the gathered parameters (gradients reduced in float32); none = policy.dtype; "
                "auto = bfloat16 on CUDA under trainer.autocast=bfloat16, else none")
    cpu_offload: bool = setting(False, "parameter shards, gradients and optimizer state in host memory")
    timeout_s: float = setting(
        300.0, "seconds a trainer rank waits for another rank that stopped answering (a collective, or a "
               "stopped process's heartbeat) before the job ends")

    def validate(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s: must be > 0")


# -- the tasks' own keys (asyncrl.tasks, asyncrl.envs) ------------------------------------------


@dataclass(frozen=True)
class ArithmeticConfig:
    """Knobs of the arithmetic task; every field is validated on construction.

    ``max_value`` bounds the operands of ``+`` and ``-`` (drawn from ``[1, max_value]``)
    and the starting quantity; ``*`` always uses a small factor in ``[2, 9]`` so that
    products stay learnable. With ``allow_negative=False`` subtraction operands are
    drawn from ``[1, min(max_value, total)]`` so running totals never drop below 0.
    """

    # Defaults sized for the embedded 2-minute warm start on a 2-core CPU (see README): operands
    # up to 10, one or two operations; 2,200 distinct problems in all.
    seed: int = setting(0, "random stream of the problem generator")
    min_steps: int = setting(1, "fewest operations per problem")
    max_steps: int = setting(2, "most operations per problem (at most 64)")
    max_value: int = setting(10, "operands of + and - and the start value are in [1, max_value]")
    ops: str = setting("+-", "operations used, a subset of +-* (* uses a factor in [2, 9])")
    n_train: int = setting(2000, "train problems generated")
    n_eval: int = setting(200, "eval problems generated")
    allow_negative: bool = setting(False, "let running totals drop below 0")

    def __post_init__(self) -> None:
        for name in ("seed", "min_steps", "max_steps", "max_value", "n_train", "n_eval"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"{name} must be an int, got {value!r}")
        if not isinstance(self.allow_negative, bool):
            raise ValueError(f"allow_negative must be a bool, got {self.allow_negative!r}")
        if not 1 <= self.min_steps <= MAX_STEPS_LIMIT:
            raise ValueError(f"min_steps must be in [1, {MAX_STEPS_LIMIT}], got {self.min_steps}")
        if not self.min_steps <= self.max_steps <= MAX_STEPS_LIMIT:
            raise ValueError(
                f"max_steps must be in [min_steps={self.min_steps}, {MAX_STEPS_LIMIT}], got {self.max_steps}"
            )
        if self.max_value < 1:
            raise ValueError(f"max_value must be >= 1, got {self.max_value}")
        if (
            not isinstance(self.ops, str)
            or not self.ops
            or set(self.ops) - set("+-*")
            or len(set(self.ops)) != len(self.ops)
        ):
            raise ValueError(f"ops must be a non-empty subset of '+-*' without repeats, got {self.ops!r}")
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        if self.n_eval < 0:
            raise ValueError(f"n_eval must be >= 0, got {self.n_eval}")
        bound = self._content_bound(self.n_train + self.n_eval)
        if self.n_train + self.n_eval > bound:
            raise ValueError(
                f"n_train + n_eval = {self.n_train + self.n_eval} exceeds the at most {bound} distinct "
                "problems this config can produce; raise max_value/max_steps or add ops"
            )

    def _content_bound(self, cap: int) -> int:
        """Upper bound on distinct contents (ignoring the non-negativity rule), capped at ``cap``."""
        per_step = self.max_value * len(set(self.ops) & set("+-"))
        if "*" in self.ops:
            per_step += MUL_FACTORS[1] - MUL_FACTORS[0] + 1
        total = 0
        for steps in range(self.min_steps, self.max_steps + 1):
            total += self.max_value * per_step**steps
            if total >= cap:
                return total
        return total


@dataclass
class DatasetFields:
    """The file tasks' settings, which the run config holds as plain ``task.*`` keys
    (``task.path``, ``task.eval_path``, ...; its ``task`` section inherits these fields)."""

    path: str | None = setting(None, "train data: .jsonl, .json, .parquet, .arrow, a save_to_disk directory or a "
                                     "cached Hub name; alone (no task name) it selects the dataset task")
    eval_path: str | None = setting(None, "eval file, same formats; null = hold out eval_fraction of path")
    eval_fraction: float = setting(0.1, "share of the train file held out for eval when eval_path is null")
    question_field: str | None = setting(
        None, "record field with the prompt (dotted path allowed); null = the task's: question (gsm8k, math), "
              "the first of prompt, messages, question (dataset)")
    answer_field: str = setting("answer", "record field with the reference answer or solution")
    prompt_template: str | None = setting(
        None, "prompt text around {question}; null = the task's: 'Question: {question}\\nAnswer:' (gsm8k, "
              "math), the prompt as written (dataset)")
    answer_format: Literal["auto", "gsm8k", "boxed", "raw"] = setting(
        "auto", "how the gold answer is read from answer_field (docs/tasks.md)")
    max_train: int | None = setting(None, "keep the first N train problems; null = all")
    max_eval: int | None = setting(None, "keep the first N eval problems; null = all")
    reward_timeout_s: float = setting(5.0, "hard bound on one math-verify check, in seconds")
    reward_workers: int = setting(1, "math-verify verifier processes")
    messages_field: str | None = setting(
        None, "column with a chat conversation ([{role, content}]) used as the prompt instead of question_field")
    split: str | None = setting(None, "split of a DatasetDict directory / Hub dataset used for training; null = train")
    eval_split: str | None = setting(
        None, "split for eval (of eval_path, or of path when eval_path is null); null = test/validation/...")
    subset: str | None = setting(None, "configuration of a Hub dataset (main for openai/gsm8k); null = the only one cached")


@dataclass
class ReasoningGymFields:
    """The task's settings, which the run config holds as plain ``task.rg_*`` keys (its ``task``
    section inherits these fields, as it does the file tasks')."""

    rg_tasks: list[str] = setting(help="reasoning-gym dataset names (task=reasoning_gym), e.g. [leg_counting, "
                                       "basic_arithmetic]", factory=list)
    rg_weights: list[float] | None = setting(None, "one weight per rg_tasks entry (its share of the rows); "
                                                   "null = all 1")
    rg_size: int = setting(2000, "reasoning-gym entries generated; the last tenth is the eval split")
    rg_seed: int = setting(0, "seed of reasoning-gym's generators")
    rg_configs: dict[str, Any] = setting(help="a dataset's own settings by name, e.g. {leg_counting: "
                                              "{max_animals: 5}}", factory=dict)
    rg_system_prompt: str = setting("default", "system prompt: a key of reasoning_gym.utils.SYSTEM_PROMPTS, "
                                               "other text as written, or '' for none")


@dataclass
class GemFields:
    """The task's settings as plain ``task.gem_*`` keys (the run config's ``task`` section inherits them)."""

    gem_demos: bool = setting(True, "task=gem: train rows demonstrate the game played by a scripted expert when "
                                    "env.name's game has one (GuessTheNumber; docs/agents.md)")
    gem_env: dict[str, Any] = setting(help="task=gem: the game the demonstrations play, {id, kwargs, max_turns}; "
                                           "filled from env.name, env.kwargs and env.max_turns at load",
                                      factory=dict)
