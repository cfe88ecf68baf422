"""Token ids of an episode's prompt and of each observation, never a re-rendering of past turns.

An episode's row is ``prompt ids | sampled ids | observation ids | sampled ids | ...``: the
engine's own sampled ids are kept as they are (token-in/token-out), and only each new segment is
tokenized. Re-rendering the whole conversation through the chat template every turn, the obvious
way, changes earlier tokens: templates drop past ``<think>`` blocks, re-encode parsed tool calls,
or put the newline that follows an end-of-turn token in the next turn; the trainer would then
train on tokens the engine never sampled.

- :class:`ChatTurns` (a tokenizer with a chat template, ``policy.chat_template`` on): the ids of new
  messages are what the template appends after a fixed two-message conversation, cut right after
  that conversation's end-of-turn token. If the template's rendering of the longer conversation
  does not start with the shorter one's ids (it rewrites the past), :class:`PrefixBroken` says so.
- :class:`PlainTurns` (no template: the embedded tiny model): ``"\\n<role>: <content>"`` per
  message and ``"\\nassistant:"``, the plain rendering single-turn chat prompts use.

Both encode every message they render (the prompt ``reset`` returned, each tool or environment
observation) with its special-token strings escaped (:mod:`asyncrl.core.special_tokens`): a tool
result that prints ``<|im_end|>`` must not end its turn in the ids, nor open a forged one.
"""

from __future__ import annotations

from collections.abc import Sequence

from asyncrl.core.special_tokens import escaper_for
from asyncrl.tasks.chat import render_plain

__all__ = ["ChatTurns", "PlainTurns", "PrefixBroken", "make_turns"]


class PrefixBroken(Exception):
    """The chat template cannot extend a conversation's ids: appending messages changes earlier ones."""


def _ids(out) -> list[int]:
    return list(out["input_ids"] if hasattr(out, "keys") else out)


class PlainTurns:
    """Renders without a chat template (see the module docstring)."""

    end_of_turn = None  # a plain turn ends at eos or a stop string

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.escape = escaper_for(tokenizer)

    def prompt_ids(self, messages: Sequence[dict]) -> list[int]:
        text = render_plain([(m["role"], m["content"]) for m in self.escape.messages(messages)])
        return self.tokenizer(text)["input_ids"]

    def observation_ids(self, messages: Sequence[dict], sampled: Sequence[int]) -> list[int]:
        del sampled  # a plain turn needs no end-of-turn token
        messages = self.escape.messages(messages)
        text = "".join(f"\n{m['role']}: {m['content'].strip()}" for m in messages) + "\nassistant:"
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]


class ChatTurns:
    """Renders with the tokenizer's chat template (see the module docstring). ``tools``: JSON
    schemas, rendered by the template into the prompt (``apply_chat_template(tools=...)``)."""

    _BASE = [{"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]

    def __init__(self, tokenizer, tools: Sequence[dict] = ()):
        self.tokenizer = tokenizer
        self.escape = escaper_for(tokenizer)
        self.tools = list(tools) or None
        base = self._render(self._BASE, generation_prompt=False)
        self.end_of_turn = _end_of_turn(tokenizer, base)
        self.base = base
        # the template's ids right after the assistant's end-of-turn (e.g. "\n") belong to the next segment
        self.cut = len(base) - base[::-1].index(self.end_of_turn)

    def _render(self, messages: Sequence[dict], generation_prompt: bool) -> list[int]:
        return _ids(self.tokenizer.apply_chat_template(list(messages), tools=self.tools, tokenize=True,
                                                       add_generation_prompt=generation_prompt))

    def prompt_ids(self, messages: Sequence[dict]) -> list[int]:
        return self._render(self.escape.messages(messages), generation_prompt=True)

    def observation_ids(self, messages: Sequence[dict], sampled: Sequence[int]) -> list[int]:
        """Ids that follow a sampled turn ``sampled`` (the engine's ids) with ``messages`` and the
        next assistant turn's header. A turn that stopped before its end-of-turn token (a stop
        string, the token budget) gets one, as an observation token: attended to, not trained."""
        full = self._render([*self._BASE, *self.escape.messages(messages)], generation_prompt=True)
        if full[:len(self.base)] != self.base:
            raise PrefixBroken("the chat template renders the earlier turns differently once messages follow")
        closing = [] if sampled and sampled[-1] == self.end_of_turn else [self.end_of_turn]
        return closing + full[self.cut:]


def _end_of_turn(tokenizer, base: list[int]) -> int:
    """The token that ends an assistant turn in ``base`` (a rendered user + assistant exchange): eos
    when the template uses it (instruct checkpoints), else the last special token of the rendering
    (``<|im_end|>`` under a base checkpoint's ``<|endoftext|>`` eos)."""
    if tokenizer.eos_token_id in base:
        return tokenizer.eos_token_id
    special = set(tokenizer.all_special_ids)
    for token in reversed(base):
        if token in special:
            return token
    raise ValueError(f"chat template of {type(tokenizer).__name__}: an assistant turn ends with no special "
                     "token, so a turn's end cannot be found in ids")


def make_turns(tokenizer, chat_template: bool, tools: Sequence[dict] = ()):
    """:class:`ChatTurns` when the tokenizer has a chat template and ``policy.chat_template`` is on,
    else :class:`PlainTurns` (as single-turn prompts are encoded: asyncrl.policy.prompts)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        return ChatTurns(tokenizer, tools)
    return PlainTurns(tokenizer)
