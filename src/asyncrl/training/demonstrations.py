"""What the embedded model's warm start learns from: the run's task's worked solutions or, when its
rows carry none, the embedded model's general warm start (the default task's, arithmetic).

A row without a worked solution (a prompt-only dataset, whose rows have no answer column; GEM's
seeds) is a demonstration of stopping at once: its supervised target is the end-of-text token
alone, and a warm start made of such rows learns exactly that (SFT loss 0, every completion empty,
nothing for RL to work with). So those rows are left out, and a task with none left gets the
warm start ``asyncrl pretrain`` builds for the arithmetic task with the same ``model.*``,
``pretrain.*`` and ``task.arithmetic.*`` settings: one shared cache entry, built on data that is
never the user's eval set. Its log line says so and points to ``policy.model_path``.
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.config import Config
from asyncrl.config.task import TaskConfig
from asyncrl.tasks import Problem, Task, configured_task

__all__ = ["WarmStartSource", "general_task", "has_worked_solution", "warm_start_source"]


@dataclass(frozen=True)
class WarmStartSource:
    """The warm start's demonstrations and the task they come from."""

    task: Task  # whose train problems are the demonstrations; its eval split scores the build
    demonstrations: tuple[Problem, ...]
    note: str | None = None  # one line for the log when they are not the run's task's

    @property
    def general(self) -> bool:
        """Whether this is the general warm start standing in for the run's task."""
        return self.note is not None


def has_worked_solution(problem: Problem) -> bool:
    """Whether ``problem`` demonstrates an answer: a non-blank solution or an episode's segments."""
    return bool(problem.solution.strip() or problem.segments)


def general_task(cfg: Config) -> Task:
    """The default task (arithmetic, with ``cfg``'s ``task.arithmetic`` settings) that the general
    warm start learns from."""
    return configured_task(TaskConfig(arithmetic=cfg.task.arithmetic))


def warm_start_source(cfg: Config, task: Task | None = None) -> WarmStartSource:
    """The demonstrations of ``cfg``'s warm start: the train problems of ``task`` (the run's, built
    from ``cfg`` when None) that carry a worked solution; when none does, the general warm start's."""
    task = task if task is not None else configured_task(cfg.task)
    train = task.problems("train")
    shown = tuple(p for p in train if has_worked_solution(p))
    if shown:
        return WarmStartSource(task, shown)
    general = general_task(cfg)
    note = (f"warm start: the {len(train)} train rows of task {cfg.task.name} carry no worked solutions, so the "
            "embedded model starts from its general warm start (the arithmetic task's), not one trained on "
            "them; to start from a model that answers these prompts, set policy.model_path")
    return WarmStartSource(general, tuple(general.problems("train")), note)
