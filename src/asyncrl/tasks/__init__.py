"""Embedded tasks: deterministic problem sets with a binary, parse-based reward.

``build_task(name, cfg)`` is the single entry point used by configs and the CLI; add a
task by registering its factory (called with the task's config) in :data:`TASKS`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncrl.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from asyncrl.tasks.base import Problem, Task, extract_answer
from asyncrl.tasks.datasets import DatasetConfig, GSM8KTask, MathTask

__all__ = [
    "TASKS",
    "ArithmeticConfig",
    "ArithmeticTask",
    "DatasetConfig",
    "GSM8KTask",
    "MathTask",
    "Problem",
    "Task",
    "build_task",
    "extract_answer",
]

TASKS: dict[str, Callable[[Any], Task]] = {"arithmetic": ArithmeticTask, "gsm8k": GSM8KTask, "math": MathTask}


def build_task(name: str, cfg: Any = None) -> Task:
    """Build task ``name``; ``cfg`` is its config object, a mapping of its fields, or None for defaults."""
    try:
        factory = TASKS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown task {name!r}; available: {', '.join(sorted(TASKS))}") from None
    return factory(cfg)
