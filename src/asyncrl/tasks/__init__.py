"""Embedded tasks: deterministic problem sets with a binary, parse-based reward.

``build_task(name, cfg)`` is the single entry point used by configs and the CLI; add a
task by registering its factory (called with the task's config), or the factory's import path
(``"module:attr"``, which :func:`task_factory` resolves), in :data:`TASKS` at import time: one line
here, or in a plugin module named in ``run.plugins``, which every process of a run imports
(asyncrl.core.registries). Never at run time: a run refuses a built-in entry replaced after import
(:func:`check_registry`), since its rollout worker processes would not see the change. Rewards are
not part of the registry: they are functions named by import path (``reward.funcs``). The
integrations' tasks (asyncrl.envs: guess, calculator, gem, reasoning-gym) are registered by import
path: they are built on this package, which imports none of them.

A task owns its settings: a factory may have ``config_from(section)``, which takes the run
config's ``task`` section and returns the object the factory is called with (``ArithmeticTask``:
``task.arithmetic``; the file tasks: the ``task.path``, ... keys of
:class:`~asyncrl.tasks.datasets.DatasetFields`); without it the factory gets None (its defaults).
A task whose rows depend on the episodes' environment may have ``follow_env(task section, env
section)``, which copies what it needs of ``env.*`` into its own keys when the run's config is
validated (asyncrl.runtime.validate; ``gem``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncrl.core.import_path import resolve
from asyncrl.core.loader import ConfigError
from asyncrl.core.registry import Registry
from asyncrl.tasks.arithmetic import ArithmeticConfig, ArithmeticTask
from asyncrl.tasks.base import Problem, Task, extract_answer, extract_any_answer
from asyncrl.tasks.datasets import DatasetConfig, DatasetFields, GSM8KTask, MathTask
from asyncrl.tasks.generic import DatasetTask

__all__ = [
    "TASKS",
    "ArithmeticConfig",
    "ArithmeticTask",
    "DatasetConfig",
    "DatasetFields",
    "DatasetTask",
    "GSM8KTask",
    "MathTask",
    "Problem",
    "Task",
    "build_task",
    "check_registry",
    "configured_task",
    "extract_answer",
    "extract_any_answer",
    "task_factory",
    "task_settings",
]

# name -> the task's factory, or its import path "module:attr" (task_factory resolves it)
TASKS: Registry[Callable[[Any], Task] | str] = Registry("task.name", {
    "arithmetic": ArithmeticTask, "gsm8k": GSM8KTask, "math": MathTask, "dataset": DatasetTask,
    "calculator": "asyncrl.envs.calculator:CalculatorTask",
    "guess": "asyncrl.envs.guess:GuessTask",
    "gem": "asyncrl.envs.gem:GemTask",
    "guess_tail": "asyncrl.envs.guess:GuessTask.tail",  # heavy-tailed ranges
    "reasoning_gym": "asyncrl.envs.reasoning_gym:ReasoningGymTask",
})
# the registry as every process sees it after a plain import: what rollout worker processes (which
# start from a fresh import, never from the trainer's memory) will build a task from
_AS_IMPORTED: dict[str, Callable[[Any], Task] | str] = dict(TASKS)


def check_registry(name: str) -> None:
    """Refuse a run whose task ``name`` was re-registered at run time (e.g. under
    ``if __name__ == "__main__":``): workers import a fresh registry, so they would train on the
    built-in task and reward while this process evaluates with the replacement. ValueError, one line.
    A name that was not there at import (a plugin's) passes: a worker that lacks it stops at once,
    naming it, instead of training on something else."""
    current = TASKS.get(name)
    fresh = _AS_IMPORTED.get(name, current)
    if current is not fresh:
        shown = current if isinstance(current, str) else \
            f"{getattr(current, '__module__', '?')}.{getattr(current, '__qualname__', current)!s}"
        raise ValueError(f"asyncrl.tasks.TASKS[{name!r}] was replaced after import (by {shown}); rollout worker "
                         "processes import the registry afresh and would not see it. Put a custom reward in "
                         "reward.funcs (an import path, docs/rewards.md) instead")


def task_factory(name: str) -> Callable[[Any], Task]:
    """The factory of task ``name``: its entry in :data:`TASKS`, resolved when it is an import path.
    ValueError naming the tasks known for a name that is not there."""
    factory = TASKS.lookup(name)
    return resolve(factory) if isinstance(factory, str) else factory


def build_task(name: str, cfg: Any = None) -> Task:
    """Build task ``name``; ``cfg`` is its config object, a mapping of its fields, or None for defaults."""
    return task_factory(name)(cfg)


def task_settings(section: Any) -> Any:
    """What the task of the run config's ``task`` section is built with: its factory's
    ``config_from(section)`` (which checks them: ValueError "field: message" relative to ``task.``),
    or None (its defaults) for a factory without one."""
    config_from = getattr(task_factory(section.name), "config_from", None)
    return None if config_from is None else config_from(section)


def configured_task(section: Any, need_eval: bool = True) -> Task:
    """The task of the run config's ``task`` section, with its problems generated/loaded and their
    sizes checked (asyncrl.tasks.limits); a bad dataset raises ConfigError. ``need_eval``: the run
    evaluates (``eval.n_problems`` > 0), so an empty eval split is refused."""
    from asyncrl.tasks.limits import check_prompt_sizes

    try:
        check_registry(section.name)
    except ValueError as err:
        raise ConfigError("task.name", str(err)) from None
    try:
        task = build_task(section.name, task_settings(section))
        task.problems("train"), task.problems("eval")
    except ValueError as err:
        raise ConfigError("task", str(err)) from None
    try:
        check_prompt_sizes(task, section.prompt_chars_bound, section.chars_bound_source())
    except ValueError as err:
        raise ConfigError("task.max_prompt_chars", str(err)) from None
    if need_eval and not task.problems("eval"):  # evaluation would divide by zero mid-run
        raise ConfigError("task", f"task {section.name!r} has no eval problems (a file task: raise "
                                  "task.eval_fraction or task.max_eval, or set task.eval_path; or "
                                  "eval.n_problems=0 to train without evaluation)")
    return task
