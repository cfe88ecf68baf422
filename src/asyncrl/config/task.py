"""What is trained on and how it is scored: ``task.*``, ``reward.*``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from asyncrl.config_loader import (
    ConfigError,
    setting,
)
from asyncrl.tasks import ArithmeticConfig


@dataclass
class TaskConfig:
    """The dataset and its reward. ``arithmetic`` is embedded; ``gsm8k`` and ``math`` read local
    files (``path``; field meanings in docs/tasks.md) and score with math-verify."""

    name: Literal["arithmetic", "gsm8k", "math"] = setting("arithmetic", "which task (a registered name)")
    arithmetic: ArithmeticConfig = field(default_factory=ArithmeticConfig)
    path: str | None = setting(None, "train file (.jsonl, .parquet, or a datasets directory); gsm8k/math")
    eval_path: str | None = setting(None, "eval file, same formats; null = hold out eval_fraction of path")
    eval_fraction: float = setting(0.1, "share of the train file held out for eval when eval_path is null")
    question_field: str = setting("question", "record field with the question (dotted path allowed)")
    answer_field: str = setting("answer", "record field with the reference answer or solution")
    prompt_template: str = setting("Question: {question}\nAnswer:", "prompt text; must contain {question}")
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
    # a 20 MB JSONL line otherwise loads and crash-loops the worker; prompt + rollout.max_new_tokens
    # must also fit the model's context (max_position_embeddings). Old name: max_prompt_tokens
    max_prompt_length: int = setting(2048, "prompt length limit in tokens (see long_prompts)")
    long_prompts: Literal["error", "drop", "truncate"] = setting(
        "error", "longer prompts: error (names file:line), drop them, or truncate (keep the last tokens)")

    DATASET_FIELDS = ("path", "eval_path", "eval_fraction", "question_field", "answer_field",
                      "prompt_template", "answer_format", "max_train", "max_eval", "reward_timeout_s",
                      "reward_workers", "messages_field", "split", "eval_split", "subset")

    @property
    def truncate_to(self) -> int | None:
        """The length prompts are left-truncated to when they are encoded; None = never."""
        return self.max_prompt_length if self.long_prompts == "truncate" else None

    def build(self):
        """The task, with its problems generated/loaded; a bad dataset raises ConfigError."""
        from asyncrl.tasks import build_task, check_registry

        section = "task.arithmetic" if self.name == "arithmetic" else "task"
        try:
            check_registry(self.name)
        except ValueError as err:
            raise ConfigError("task.name", str(err)) from None
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
        if self.max_prompt_length < 1:
            raise ValueError("max_prompt_length: must be >= 1")
        if self.name == "arithmetic":
            return
        if self.eval_path is None and self.eval_fraction == 0:
            raise ValueError("eval_fraction: must be > 0 when task.eval_path is not set (no eval problems)")
        if self.path is None:
            raise ValueError(f"path: task {self.name!r} reads a local file; set task.path=<jsonl|parquet|dir>")
        self.params()  # DatasetConfig validates every field ("field: message")
        from asyncrl.tasks.records import is_hub_name

        for name in ("path", "eval_path"):
            value = getattr(self, name)
            if value is not None and not Path(value).exists() and not is_hub_name(value):
                raise ValueError(f"{name}: no such file or directory: {value}")


@dataclass
class RewardConfig:
    """Reward functions by import path (docs/rewards.md): the reward of a completion is the weighted
    sum of their values. Its own section, not task fields: a task is the problems, the reward is what
    scores them, and one reward (a format bonus, say) applies to any task."""

    funcs: list[str] = setting(
        help="'pkg.module:fn' or 'path/to/file.py:fn' each; [] = the task's correctness reward "
             "(asyncrl.tasks.rewards:correct_answer)", factory=list)
    weights: list[float] | None = setting(None, "one weight per function; null = all 1")
    on_error: Literal["raise", "zero"] = setting(
        "raise", "a function that raises or returns a non-number: raise = stop the run naming it; "
                 "zero = count it 0 (metric reward/errors)")

    def validate(self) -> None:
        """Import every function now, in this process (workers repeat this from the same strings):
        a bad path fails at load, before anything starts."""
        from asyncrl.rewards import load_function, normalize_path

        for i, path in enumerate(self.funcs):
            try:
                self.funcs[i] = normalize_path(path)  # a file path: absolute, for workers and resumes
                load_function(self.funcs[i])
            except ValueError as err:
                raise ValueError(f"funcs[{i}]: {err}") from None
        if self.weights is not None and len(self.weights) != max(1, len(self.funcs)):
            raise ValueError(f"weights: {len(self.weights)} weight(s) for {max(1, len(self.funcs))} "
                             "reward function(s); give one per function (or none: all 1)")

    def build(self, task=None):
        """The :class:`~asyncrl.rewards.RewardSet` of this config, bound to ``task``."""
        from asyncrl.rewards import RewardSet

        return RewardSet.from_config(self, task)
