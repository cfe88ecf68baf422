"""Prompt → token ids, the same way on every path (sampling, evaluation, workers, start-up checks).

A prompt is a string or a chat conversation (``(role, content)`` pairs, :mod:`asyncrl.tasks.chat`).
With ``chat_template`` on and a tokenizer that has one, both go through ``apply_chat_template``
(a string as one user turn) with the generation prompt appended; otherwise a string is encoded as
it is and a conversation as its plain ``role: content`` rendering (the embedded tiny model).
"""

from __future__ import annotations

from collections.abc import Sequence

from asyncrl.tasks.chat import as_dicts, render_plain


def encode_prompt(tokenizer, prompt: str | Sequence[tuple[str, str]], chat_template: bool = True) -> list[int]:
    """Token ids of ``prompt`` as the policy sees it (see the module docstring)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else as_dicts(prompt)
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)
    return tokenizer(prompt if isinstance(prompt, str) else render_plain(prompt))["input_ids"]


def prompt_of(problem) -> str | Sequence[tuple[str, str]]:
    """What a problem asks: its conversation when it has one, else its prompt string."""
    return getattr(problem, "messages", None) or problem.prompt


def encode_problems(tokenizer, problems, n: int = 1, chat_template: bool = True,
                    max_length: int | None = None) -> list[list[int]]:
    """Prompt ids of ``n`` samples per problem (rows: problems × n, in order); each encoded once.
    ``max_length``: keep only the last ``max_length`` tokens of a longer prompt (left truncation,
    as TRL does: the end of a prompt, where the question and the generation prompt are, stays)."""
    out: list[list[int]] = []
    for problem in problems:
        ids = encode_prompt(tokenizer, prompt_of(problem), chat_template)
        if max_length is not None and len(ids) > max_length:
            ids = ids[-max_length:]
        out += [ids] * n
    return out
