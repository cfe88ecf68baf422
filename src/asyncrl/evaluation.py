"""Held-out evaluation: mean task reward of one completion per problem."""

from __future__ import annotations

import torch

from asyncrl.policy.prompts import encode_prompt
from asyncrl.policy.sampling import sample
from asyncrl.rollout.scoring import rewards_of
from asyncrl.tasks import Problem, Task


def evaluate(model, tokenizer, task: Task, problems: list[Problem], *, max_new_tokens: int,
             temperature: float = 0.0, batch_size: int = 128, seed: int = 0, samples: int = 1,
             chat_template: bool = True) -> float:
    """Mean reward in [0, 1] over ``samples`` completions per problem (pass@1 estimated from
    several samples: less noise than one); temperature 0 = greedy, where one sample suffices."""
    if not problems:
        raise ValueError("evaluate: no problems")
    if temperature == 0:
        samples = 1
    problems = [p for p in problems for _ in range(samples)]
    generator = torch.Generator().manual_seed(seed)
    total = 0.0
    for start in range(0, len(problems), batch_size):
        chunk = problems[start:start + batch_size]
        prompts = [encode_prompt(tokenizer, p.prompt, chat_template) for p in chunk]
        gen = sample(model, prompts, max_new_tokens=max_new_tokens, temperature=temperature,
                     eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=generator)
        texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
        total += sum(rewards_of(task, texts, chunk))
    return total / len(problems)
