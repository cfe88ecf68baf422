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
