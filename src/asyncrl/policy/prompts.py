"""Prompt text → token ids, the same way on every path (sampling, evaluation, workers)."""

from __future__ import annotations


def encode_prompt(tokenizer, text: str, chat_template: bool = True) -> list[int]:
    """Wrap ``text`` as one user turn with the tokenizer's chat template when it has one (instruct
    checkpoints) and ``chat_template`` is on; otherwise plain encoding (base models, the tiny one)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(text)["input_ids"]


def encode_problems(tokenizer, problems, n: int = 1, chat_template: bool = True) -> list[list[int]]:
    """Prompt ids of ``n`` samples per problem (rows: problems × n, in order); each encoded once."""
    out: list[list[int]] = []
    for problem in problems:
        ids = encode_prompt(tokenizer, problem.prompt, chat_template)
        out += [ids] * n
    return out
