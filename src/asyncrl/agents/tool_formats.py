"""Tool calls as each model family writes them, and which family a tokenizer's chat template teaches.

* ``hermes`` (Qwen, Hermes, most open models): ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
  one block per call (:func:`asyncrl.agents.tools.parse_tool_calls`).
* ``llama3`` (Llama 3.1 / 3.2 / 3.3 JSON tool calling): ``<|python_tag|>{"name": ..., "parameters": {...}}``,
  several separated by ``;``; the tag is a special token, so text decoded without special tokens
  starts at the ``{``.
* ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (v3 templates), or
  ``[TOOL_CALLS]name[ARGS]{...}`` per call (v11 and later).

A parser never raises: a call the model garbled is a :class:`MalformedCall`, which the episode
answers with an error observation. Text that is not a call of the format is no call (``[]``).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from asyncrl.agents.tools import MalformedCall, ToolCall, _json_error, call_from_object, parse_tool_calls
from asyncrl.core.registry import Registry

__all__ = ["FORMATS", "ToolFormat", "detect_format", "parse_llama3", "parse_mistral", "tool_format", "turn_stops"]

_PYTHON_TAG, _MISTRAL_CALLS, _MISTRAL_ARGS = "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]"


@dataclass(frozen=True)
class ToolFormat:
    """How one family writes calls.

    ``parse``: a turn's text -> its calls. ``stops``: strings that end a turn that called (always
    stops). ``first_call_stops``: strings that end a turn at its first call, used when a turn makes
    one call (``env.parallel_tool_calls=off``). ``keeps_special``: parse the turn's text decoded
    with its special tokens (Mistral's ``[TOOL_CALLS]``/``[ARGS]`` are special tokens and carry the
    call's structure); else the text as the conversation holds it."""

    name: str
    parse: Callable[[str], list]
    stops: tuple[str, ...] = ()
    first_call_stops: tuple[str, ...] = ()
    keeps_special: bool = False


def _json_values(text: str) -> tuple[list, str | None]:
    """The JSON values at the start of ``text``, separated by ``;``, commas or whitespace:
    ``(values, None)``, or ``(values read so far, why the rest is not JSON)``."""
    decoder, values, pos = json.JSONDecoder(), [], 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n;,":
            pos += 1
        if pos >= len(text):
            return values, None
        try:
            value, pos = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as err:
            return values, f"not JSON: {_json_error(err)}"
        values.append(value)


def parse_llama3(text: str) -> list[ToolCall | MalformedCall]:
    """Llama 3's JSON calls. Without the ``<|python_tag|>`` (decoded away), a text is calls only
    when it is JSON objects with a ``name`` and ``parameters``: an answer that merely starts with
    ``{`` stays an answer."""
    if not isinstance(text, str):
        return []
    body = text.strip()
    tagged = body.startswith(_PYTHON_TAG)
    body = body[len(_PYTHON_TAG):].strip() if tagged else body
    if not body.startswith("{"):
        return [MalformedCall(text, "no JSON call after <|python_tag|>")] if tagged else []
    values, problem = _json_values(body)
    looks_like_calls = values and all(isinstance(v, dict) and "name" in v for v in values)
    if not tagged and not looks_like_calls:
        return []
    calls = [call_from_object(json.dumps(v), v, ("parameters", "arguments")) for v in values]
    return calls + ([MalformedCall(body, problem)] if problem else [])


def _mistral_v11(body: str) -> list[ToolCall | MalformedCall]:
    """``name[ARGS]{...}`` after each ``[TOOL_CALLS]``."""
    calls = []
    for part in body.split(_MISTRAL_CALLS):
        if not part.strip():
            continue
        name, sep, args = part.partition(_MISTRAL_ARGS)
        if not sep:
            calls.append(MalformedCall(part, "no [ARGS] after the tool's name"))
            continue
        values, problem = _json_values(args.strip())
        if problem or len(values) != 1:
            calls.append(MalformedCall(part, problem or "one JSON object of arguments expected"))
            continue
        calls.append(call_from_object(part, {"name": name, "arguments": values[0]}, ("arguments",)))
    return calls


def parse_mistral(text: str) -> list[ToolCall | MalformedCall]:
    """Mistral's calls: a JSON list after ``[TOOL_CALLS]`` (or, decoded away, a text that is such
    a list), or the v11 ``name[ARGS]{...}`` form."""
    if not isinstance(text, str):
        return []
    start = text.find(_MISTRAL_CALLS)
    body = text[start + len(_MISTRAL_CALLS):].strip() if start >= 0 else text.strip()
    if start < 0 and not body.startswith("[{"):
        return []
    if not body.startswith("["):
        return _mistral_v11(body)
    values, problem = _json_values(body)
    if problem or len(values) != 1 or not isinstance(values[0], list):
        if start < 0:  # no marker: an answer that looked like a list
            return []
        return [MalformedCall(text[start:], problem or "not one JSON list of calls")]
    return [call_from_object(json.dumps(v), v, ("arguments", "parameters")) for v in values[0]]


FORMATS: Registry[ToolFormat] = Registry("env.tool_format", {
    # several <tool_call> blocks, then the end of turn; one call per turn: stop at the first close
    "hermes": ToolFormat("hermes", parse_tool_calls, first_call_stops=("</tool_call>",)),
    # <|eom_id|> ends a turn that waits on a call's result (it is not always the tokenizer's eos)
    "llama3": ToolFormat("llama3", parse_llama3, stops=("<|eom_id|>",), keeps_special=True),
    "mistral": ToolFormat("mistral", parse_mistral, keeps_special=True),
})


def detect_format(chat_template: str | None) -> str:
    """The format a chat template teaches, read from the markers it writes; ``hermes`` when it
    names none of them (the tiny models' templates, and Qwen's)."""
    template = chat_template or ""
    if isinstance(template, dict):  # a tokenizer with several named templates
        template = " ".join(map(str, template.values()))
    if "<tool_call>" in template:
        return "hermes"
    if _MISTRAL_CALLS in template:
        return "mistral"
    if _PYTHON_TAG in template or "<|eom_id|>" in template:
        return "llama3"
    return "hermes"


def tool_format(name: str, tokenizer) -> ToolFormat:
    """The format of ``env.tool_format``: ``auto`` reads the tokenizer's chat template
    (:func:`detect_format`; ``hermes`` for None)."""
    if name == "auto":
        name = detect_format(getattr(tokenizer, "chat_template", None))
    why = FORMATS.why_not(name, ("auto",))
    if why is not None:
        raise ValueError(f"tool_format: {why}")
    return FORMATS[name]


def turn_stops(fmt: ToolFormat, parallel: bool) -> tuple[str, ...]:
    """The strings that end a turn of a run with tools: the format's own, and with one call per
    turn (``parallel`` off) those that close its first call."""
    return fmt.stops + (() if parallel else fmt.first_call_stops)
