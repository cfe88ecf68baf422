"""Shared pieces of the episode tests: a scripted engine that returns given ids turn by turn (and
records what it was asked), chat tokenizers with the templates that break re-rendering, and small
environments."""

from __future__ import annotations

import torch

from asyncrl.policy.tokenizer import train_tokenizer
from asyncrl.types import Generation

CORPUS = ["user: What is 12 * 34?\nassistant: <think>12 times 34</think> the answer is #### 408",
          '<tool_call>{"name": "calculator", "arguments": {"expression": "12 * 34"}}</tool_call>',
          "tool: 408 higher lower guess number from to"] * 20

# ChatML whose assistant turns drop their <think> block once another turn follows (as Qwen3's does)
DROPS_THINK = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n"
    "{% if m.role == 'assistant' and not loop.last %}{{ m.content.split('</think>')[-1].lstrip() }}"
    "{% else %}{{ m.content }}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# turns separated by a lone newline after the end-of-turn token, no header after it
LONE_NEWLINE = (
    "{% for m in messages %}{{ m.role }}: {{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}")


def chat_tokenizer(template: str):
    tok = train_tokenizer(CORPUS, 400, split_digits=True)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = template
    return tok


class ScriptedEngine:
    """Returns, for the k-th call, ``script[k][row]`` (text encoded once, or ids) for each live row;
    every sampled token gets log-prob −0.5 and the engine's current version. Records the contexts."""

    def __init__(self, tokenizer, script: list[list], version: int = 0):
        self.tokenizer, self.script, self.version = tokenizer, script, version
        self.calls: list[list[list[int]]] = []
        self.sampled: list[list[list[int]]] = []
        self.stops: list[tuple] = []

    def ids(self, item) -> list[int]:
        return list(item) if isinstance(item, list) else self.tokenizer(item, add_special_tokens=False)["input_ids"]

    def generate(self, prompts, *, between_chunks=None, max_new_tokens=None, stop=()):
        turn = self.script[len(self.calls)]
        self.calls.append([list(p) for p in prompts])
        self.stops.append(tuple(stop))
        rows = [self.ids(turn[i])[:max_new_tokens] for i in range(len(prompts))]
        self.sampled.append(rows)
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.tokenizer.pad_token_id)
        versions = torch.full((len(rows), width), -1)
        for i, r in enumerate(rows):
            ids[i, :len(r)] = torch.tensor(r)
            versions[i, :len(r)] = self.version
        logps = torch.where(versions >= 0, -0.5, 0.0)
        return Generation(prompt_ids=torch.zeros((len(rows), 1), dtype=torch.long),
                          prompt_mask=torch.ones((len(rows), 1), dtype=torch.bool), completion_ids=ids,
                          behav_logp=logps, versions=versions, completion_mask=versions >= 0)

    def update_weights(self, weights, version):
        self.version = version


class Countdown:
    """Ends at the turn that says "stop"; answers "go on" otherwise; reward 0.5 per turn."""

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        done = "stop" in action
        return ("" if done else "go on"), 0.5, done, {"last": action}
