"""What is trained on and how it is scored: ``task.*``, ``reward.*``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from asyncrl.config.parts import ArithmeticConfig, DatasetFields, GemFields, ReasoningGymFields
from asyncrl.core.loader import setting


# the default task name: resolved on construction, so a file named alone is never trained past
AUTO_TASK = "auto"
# task.max_prompt_chars by default: this many characters per token of task.max_prompt_length
CHARS_PER_TOKEN = 32


def prompt_chars_bound(max_prompt_length: int, max_prompt_chars: int | None) -> int:
    """The bound in characters: ``max_prompt_chars``, or by default ``CHARS_PER_TOKEN`` per token."""
    return max_prompt_chars if max_prompt_chars is not None else CHARS_PER_TOKEN * max_prompt_length


@dataclass
class _TaskName:
    # a base of its own so that `name` stays the section's first key (base fields come first)
    name: str = setting(AUTO_TASK, "which task: arithmetic, gsm8k, math, dataset (any rows, your reward "
                        "functions), reasoning_gym (task.rg_tasks), gem (seeds for env.name=gem:<id>), or a "
                        "plugin's (asyncrl.tasks.TASKS); auto = dataset when task.path is set, else arithmetic",
                        names="asyncrl.tasks:TASKS", also=(AUTO_TASK,))


# the bases' keys come in reverse order: name, the file tasks' (path, ...), reasoning-gym's (rg_*), GEM's (gem_*)
@dataclass
class TaskConfig(GemFields, ReasoningGymFields, DatasetFields, _TaskName):
    """The dataset and its reward. ``arithmetic`` is embedded; ``gsm8k`` and ``math`` read local
    files (``path``; field meanings in docs/tasks.md) and score with math-verify; ``dataset`` reads
    any rows, scored by ``reward.funcs`` (or math-verify against an answer column);
    ``reasoning_gym`` generates reasoning-gym's problems (``rg_tasks``) and scores with its scorers;
    ``gem`` gives seeds for ``env.name=gem:<id>`` (``task.gem_*``, asyncrl.envs.gem.GemFields).
    Each task owns its settings: ``task.arithmetic`` (asyncrl.tasks.arithmetic), the file tasks' keys
    (asyncrl.tasks.datasets.DatasetFields) and ``task.rg_*`` (asyncrl.envs.reasoning_gym.ReasoningGymFields),
    which this section inherits."""

    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    # a 20 MB JSONL line otherwise loads and crash-loops the worker; prompt + rollout.max_new_tokens
    # must also fit the model's context (max_position_embeddings). Old name: max_prompt_tokens
    max_prompt_length: int = setting(2048, "prompt length limit in tokens (see long_prompts)")
    long_prompts: Literal["error", "drop", "truncate"] = setting(
        "error", "longer prompts: error (names file:line), drop them, or truncate (keep the last tokens)")
    # measured before any tokenizer runs: a 5 MB prompt otherwise takes minutes to tokenize (asyncrl.tasks.limits)
    max_prompt_chars: int | None = setting(
        None, "prompt size bound in characters, checked when the task is built (before tokenizing; "
              "task.long_prompts does not apply past it); null = 32 per token of max_prompt_length")

    def __post_init__(self) -> None:
        if self.name == AUTO_TASK:  # the saved config and everything downstream see the task it picks
            self.name = "dataset" if self.path is not None else "arithmetic"

    @property
    def truncate_to(self) -> int | None:
        """The length prompts are left-truncated to when they are encoded; None = never."""
        return self.max_prompt_length if self.long_prompts == "truncate" else None

    @property
    def prompt_chars_bound(self) -> int:
        """The prompt size bound in characters (``max_prompt_chars``, or its default)."""
        return prompt_chars_bound(self.max_prompt_length, self.max_prompt_chars)

    def chars_bound_source(self) -> str:
        """Where :attr:`prompt_chars_bound` comes from, as an error message says it."""
        if self.max_prompt_chars is not None:
            return "task.max_prompt_chars"
        return (f"task.max_prompt_chars: {CHARS_PER_TOKEN} per token of task.max_prompt_length="
                f"{self.max_prompt_length}")

    def validate(self) -> None:
        if self.max_prompt_length < 1:
            raise ValueError("max_prompt_length: must be >= 1")
        if self.max_prompt_chars is not None and self.max_prompt_chars < 1:
            raise ValueError("max_prompt_chars: must be >= 1 (or null: 32 per token of max_prompt_length)")
        # the task's own checks (its factory's config_from) are asyncrl.runtime.validate's


@dataclass
class RewardConfig:
    """Reward functions by import path and reward models by directory (docs/rewards.md): the reward
    of a completion is the weighted sum of their values. Its own section, not task fields: a task is
    the problems, the reward is what scores them, and one reward (a format bonus, say) applies to any
    task."""

    funcs: list[str] = setting(
        help="'pkg.module:fn' or 'path/to/file.py:fn' each; [] = the task's correctness reward "
             "(asyncrl.tasks.rewards:correct_answer), unless reward.models names a model", factory=list)
    weights: list[float] | None = setting(None, "one weight per function, then one per model (reward.funcs "
                                                "order, then reward.models order); null = all 1")
    on_error: Literal["raise", "zero"] = setting(
        "raise", "a function that raises or returns a non-number: raise = stop the run naming it; "
                 "zero = count it 0 (metric reward/errors)")
    completion_format: Literal["auto", "text"] = setting(
        "auto", "auto: a chat prompt's completions reach functions as [{role: assistant, content}] and its "
                "prompts as messages (TRL's conversational format); text: plain strings always")
    # per call of one function on one batch; task.reward_timeout_s bounds one math-verify check
    # inside the built-in correctness reward, well under this
    timeout_s: float | None = setting(
        300.0, "seconds one call of a reward function (on one batch) may take; past it the call is "
               "stopped and handled per on_error; null = no bound")
    # after the fields above: a RewardConfig(funcs, weights, on_error) built by position stays valid
    models: list[str] = setting(
        help="reward models: local Hugging Face directories of a sequence-classification model with "
             "num_labels=1 (and its tokenizer), whose logit on prompt + completion is the reward (TRL's "
             "reward model); scored after the functions", factory=list)
    model_device: str = setting("cpu", "device the reward models (reward.models) run on: cpu, cuda, cuda:1")
    model_dtype: Literal["auto", "float32", "bfloat16", "float16"] = setting(
        "auto", "dtype of the reward models' weights; auto = bfloat16 on CUDA, float32 elsewhere")
    model_batch_size: int = setting(16, "completions per forward pass of a reward model")

    def validate(self) -> None:
        """The section's own numbers; its functions are imported and its model directories checked
        by asyncrl.runtime.validate (in every process of a run, from the same strings)."""
        if self.timeout_s is not None and self.timeout_s <= 0:
            raise ValueError("timeout_s: must be > 0 (or null: no bound)")
        self._validate_models()
        sources = len(self.funcs) + len(self.models) or 1  # none named: the task's correctness reward
        if self.weights is not None and len(self.weights) != sources:
            raise ValueError(f"weights: {len(self.weights)} weight(s) for {sources} reward function(s) and "
                             "model(s); give one per function, then one per model (or none: all 1)")

    def _validate_models(self) -> None:
        import torch

        if self.model_batch_size < 1:
            raise ValueError("model_batch_size: must be >= 1")
        try:
            torch.device(self.model_device)
        except (RuntimeError, ValueError):
            raise ValueError(f"model_device: {self.model_device!r} is not a torch device (cpu, cuda, cuda:1)") from None
