"""Generation engine on ``transformers`` (CPU or GPU): prompts in, version-tagged tokens out."""

from __future__ import annotations

import torch

from asyncrl.policy.prompts import encode_prompt
from asyncrl.policy.sampling import sample
from asyncrl.tasks import Problem
from asyncrl.types import Generation


class TransformersEngine:
    """Samples ``n`` completions per problem with the model it holds; tags tokens with ``version``."""

    def __init__(self, model, tokenizer, *, max_new_tokens: int, temperature: float, seed: int = 0,
                 chat_template: bool = True):
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.chat_template = chat_template
        self.generator = torch.Generator().manual_seed(seed)

    def generate(self, problems: list[Problem], n: int, version: int) -> Generation:
        prompts = [encode_prompt(self.tokenizer, p.prompt, self.chat_template) for p in problems for _ in range(n)]
        return sample(self.model, prompts, max_new_tokens=self.max_new_tokens,
                      temperature=self.temperature, eos_id=self.tokenizer.eos_token_id,
                      pad_id=self.tokenizer.pad_token_id, version=version, generator=self.generator)
