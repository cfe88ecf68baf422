"""Chat-format prompts: a row's list of ``{"role", "content"}`` messages.

A conversation is kept as a tuple of ``(role, content)`` pairs (hashable, so a :class:`Problem`
holding one stays a plain frozen value). The rollout renders it with the tokenizer's chat template
(:mod:`asyncrl.policy.prompts`); a tokenizer without one (the embedded tiny model, base
checkpoints) gets :func:`render_plain`, one ``role: content`` line per message and a final
``assistant:`` where the completion starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ROLES", "EpisodeText", "Messages", "as_dicts", "completion_text", "parse_messages", "render_plain",
           "split_reference"]

Messages = tuple[tuple[str, str], ...]
# the roles chat templates know (OpenAI's developer and function, Llama's ipython included); any
# other would be rendered as a made-up speaker ("wizard: ...") and trained on as if meant
ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")


def parse_messages(value: Any, where: str, field: str) -> Messages:
    """``value`` (a list of ``{"role": str, "content": str}``) as a :data:`Messages`; ValueError at
    ``where`` naming ``field`` otherwise."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{where}: field {field!r} must be a non-empty list of {{role, content}} messages")
    out = []
    for i, message in enumerate(value):
        if not isinstance(message, dict):
            raise ValueError(f"{where}: field {field!r} item {i} must be a {{role, content}} object, "
                             f"got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role.strip():
            raise ValueError(f"{where}: field {field!r} item {i}: 'role' must be a non-empty string")
        if role.strip() not in ROLES:
            raise ValueError(f"{where}: field {field!r} item {i}: unknown role {role.strip()!r} "
                             f"(known: {', '.join(ROLES)})")
        if not isinstance(content, str):
            raise ValueError(f"{where}: field {field!r} item {i}: 'content' must be a string, "
                             f"got {type(content).__name__}")
        out.append((role.strip(), content))
    return tuple(out)


def split_reference(messages: Messages) -> tuple[Messages, str | None]:
    """(the prompt, the reference answer): trailing assistant turns are not part of the prompt (the
    policy writes that turn); the last one's content is returned as a reference answer."""
    end = len(messages)
    while end and messages[end - 1][0] == "assistant":
        end -= 1
    reference = messages[-1][1] if end < len(messages) else None
    return messages[:end], reference


def render_plain(messages: Sequence[tuple[str, str]]) -> str:
    """The template-free rendering: ``"system: ...\\nuser: ...\\nassistant:"``."""
    return "".join(f"{role}: {content.strip()}\n" for role, content in messages) + "assistant:"


def as_dicts(messages: Sequence[tuple[str, str]]) -> list[dict[str, str]]:
    """The ``[{"role", "content"}]`` list ``apply_chat_template`` takes."""
    return [{"role": role, "content": content} for role, content in messages]


class EpisodeText(str):
    """An episode's text after the prompt, as reward functions receive it under
    ``reward.completion_format=text``: the decoded ids, observations included, so it is a plain
    ``str`` to them. ``messages`` keeps the conversation it came from (roles included), from which
    answer extraction (:func:`completion_text`) and reward models read who wrote what: tool and
    environment output can print ``#### 42`` as easily as the policy can."""

    messages: list[dict]

    # ``messages`` has a default because pickle rebuilds a str subclass from its text alone, then
    # restores the attributes
    def __new__(cls, text: str, messages: Sequence[dict] = ()):
        out = super().__new__(cls, text)
        out.messages = list(messages)
        return out


def completion_text(completion: Any) -> str:
    """The text a completion answers with, whether plain or conversational (``[{"role":
    "assistant", "content"}]``, what reward functions receive for chat prompts): the content of its
    last assistant message. An episode's tool and environment messages are never read as its
    answer, nor is anything but the final assistant turn of an :class:`EpisodeText`."""
    messages = completion.messages if isinstance(completion, EpisodeText) and completion.messages else completion
    if isinstance(messages, (list, tuple)):
        for message in reversed(messages):
            if not isinstance(message, dict):
                return str(message)
            if message.get("role", "assistant") == "assistant":
                return str(message.get("content") or "")
        return ""
    return str(completion) if isinstance(completion, EpisodeText) else completion
