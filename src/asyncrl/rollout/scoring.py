"""Turn a Generation into a scored Batch: decode, reward (the run's reward functions, see
:mod:`asyncrl.rewards`), group ids. :func:`rewards_of` is a task's own reward, checked."""

from __future__ import annotations

import dataclasses

import torch

from asyncrl.core.loader import ConfigError
from asyncrl.core.user_code import finite_number, first_line
from asyncrl.rewards import RewardSet
from asyncrl.rewards.resolve import EPISODE_CONTEXT
from asyncrl.tasks import Problem, Task
from asyncrl.types import Batch, Generation


class RewardError(ConfigError):
    """A reward function raised or returned a non-finite number: one line naming the task and the
    problem, exit 2. An error rather than a zeroed reward with a warning: a NaN reward is a bug in
    the reward, and replacing it silently would train on an objective nobody chose."""

    def __init__(self, task: Task, problem: Problem | None, message: str):
        where = f"problem {problem.uid}" if problem is not None else "a batch"
        source = getattr(task, "source", None)
        if problem is not None and source is not None:
            where += f" ({source(problem.uid)})"
        super().__init__(f"task.name={getattr(task, 'name', type(task).__name__)}", f"reward of {where}: {message}")


def rewards_of(task: Task, texts: list[str], problems: list[Problem]) -> list[float]:
    """Batch scoring when the task offers it (math-verify runs in a process pool); every reward a
    finite number, else :class:`RewardError`."""
    many = getattr(task, "reward_many", None)
    values: list = []
    try:
        if many is not None:
            values = list(many(texts, problems))
        else:
            for t, p in zip(texts, problems):
                values.append(task.reward(t, p))
    except Exception as err:  # a user's reward function may raise anything
        culprit = problems[len(values)] if many is None and len(values) < len(problems) else None
        raise RewardError(task, culprit, f"raised {first_line(err)}") from None
    for value, problem in zip(values, problems):
        if finite_number(value) is None:
            raise RewardError(task, problem, f"is {value!r}; rewards must be finite numbers")
    return values


def check_reward(task: Task, rewards: RewardSet | None = None, *, episodes: bool = False) -> None:
    """Score the gold solutions of the first train problems once, at start-up: a reward function
    that raises, returns NaN or needs a field the rows lack fails here, before a run directory or a
    worker exists. ``rewards``: the run's reward functions (None: the task's own reward).
    ``episodes``: the run plays episodes, so a function that needs what only an episode gives
    (``environments``, ``tool_calls``...) is left to the first scored episode."""
    problems = task.problems("train")[:2]
    if rewards is None:
        rewards_of(task, [p.solution for p in problems], problems)
        return
    if episodes:
        rewards = rewards.without_needing(EPISODE_CONTEXT)
        if rewards is None:
            return
    rewards.score([p.solution for p in problems], problems)


def group_ids_of(n_problems: int, n: int, first_group_id: int = 0) -> torch.Tensor:
    """[n_problems × n] long: the group id of each row (its problem's), rows problems × n in order."""
    return torch.arange(n_problems, dtype=torch.long).repeat_interleave(n) + first_group_id


def score(gen: Generation, problems: list[Problem], n: int, rewards: RewardSet | Task, tokenizer,
          first_group_id: int = 0) -> Batch:
    """Rows of ``gen`` are ``n`` consecutive samples per problem, in ``problems`` order; ``rewards``
    gives each row its total (``Batch.rewards``) and per-function values (``Batch.reward_parts``).
    A bare task stands for its own correctness reward (the default of ``reward.funcs``)."""
    if not isinstance(rewards, RewardSet):
        rewards = RewardSet.for_task(rewards)
    texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
    rows = [p for p in problems for _ in range(n)]
    if len(rows) != len(texts):
        raise ValueError(f"score: {len(texts)} completions for {len(problems)} problems × {n}")
    scores = rewards.score(texts, rows)
    total = torch.tensor(scores.total, dtype=torch.float32)
    group_ids = group_ids_of(len(problems), n, first_group_id)
    fields = {f.name: getattr(gen, f.name) for f in dataclasses.fields(gen)}
    return Batch(**fields, rewards=total, group_ids=group_ids, advantages=torch.zeros_like(total),
                 reward_parts=rewards.parts_tensor(scores), reward_failed=rewards.failed_tensor(scores))
