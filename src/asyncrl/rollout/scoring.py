"""Turn a Generation into a scored Batch: decode, reward, group ids."""

from __future__ import annotations

import dataclasses

import torch

from asyncrl.tasks import Problem, Task
from asyncrl.types import Batch, Generation


def rewards_of(task: Task, texts: list[str], problems: list[Problem]) -> list[float]:
    """Batch scoring when the task offers it (math-verify runs in a process pool)."""
    many = getattr(task, "reward_many", None)
    if many is not None:
        return list(many(texts, problems))
    return [task.reward(t, p) for t, p in zip(texts, problems)]


def score(gen: Generation, problems: list[Problem], n: int, task: Task, tokenizer,
          first_group_id: int = 0) -> Batch:
    """Rows of ``gen`` are ``n`` consecutive samples per problem, in ``problems`` order."""
    texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
    rows = [p for p in problems for _ in range(n)]
    if len(rows) != len(texts):
        raise ValueError(f"score: {len(texts)} completions for {len(problems)} problems × {n}")
    rewards = torch.tensor(rewards_of(task, texts, rows), dtype=torch.float32)
    group_ids = torch.arange(len(problems), dtype=torch.long).repeat_interleave(n) + first_group_id
    fields = {f.name: getattr(gen, f.name) for f in dataclasses.fields(gen)}
    return Batch(**fields, rewards=rewards, group_ids=group_ids, advantages=torch.zeros_like(rewards))
