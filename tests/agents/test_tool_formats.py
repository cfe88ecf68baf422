"""Tool calls as Llama 3 and Mistral write them (Qwen/Hermes: test_tools.py), and the format a
chat template teaches. Parsers never raise: garbled calls are MalformedCall, answers are no call."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncrl.agents.tool_formats import FORMATS, detect_format, parse_llama3, parse_mistral
from asyncrl.agents.tools import MalformedCall, ToolCall


@pytest.mark.parametrize("text, calls", [
    ('<|python_tag|>{"name": "add", "parameters": {"a": 2, "b": 3}}', [ToolCall("add", {"a": 2, "b": 3})]),
    ('{"name": "add", "parameters": {"a": 2, "b": 3}}', [ToolCall("add", {"a": 2, "b": 3})]),  # tag decoded away
    ('<|python_tag|>{"name": "a", "parameters": {}}; {"name": "b", "arguments": "{\\"x\\": 1}"}',
     [ToolCall("a", {}), ToolCall("b", {"x": 1})]),
    ("The answer is 5.", []),
    ('{"answer": 5}', []),  # JSON, but no call: an answer
])
def test_llama3(text, calls):
    assert parse_llama3(text) == calls


def test_llama3_garbled_after_the_tag_is_malformed():
    (call,) = parse_llama3('<|python_tag|>{"name": "add", "parameters": {"a": 2')
    assert isinstance(call, MalformedCall) and call.reason.startswith("not JSON")
    (call,) = parse_llama3("<|python_tag|>print(1)")
    assert isinstance(call, MalformedCall) and call.reason == "no JSON call after <|python_tag|>"


@pytest.mark.parametrize("text, calls", [
    ('[TOOL_CALLS][{"name": "add", "arguments": {"a": 2, "b": 3}}, {"name": "neg", "arguments": {"x": 1}}]',
     [ToolCall("add", {"a": 2, "b": 3}), ToolCall("neg", {"x": 1})]),
    ('[{"name": "add", "arguments": {"a": 2}}]', [ToolCall("add", {"a": 2})]),  # marker decoded away
    ('[TOOL_CALLS]add[ARGS]{"a": 2, "b": 3}[TOOL_CALLS]neg[ARGS]{"x": 1}',
     [ToolCall("add", {"a": 2, "b": 3}), ToolCall("neg", {"x": 1})]),
    ("[1, 2, 3] are the numbers", []),
    ("plain text", []),
])
def test_mistral(text, calls):
    assert parse_mistral(text) == calls


def test_mistral_garbled_is_malformed():
    (call,) = parse_mistral('[TOOL_CALLS][{"name": "add", "arguments": {"a": ')
    assert isinstance(call, MalformedCall)
    (call,) = parse_mistral("[TOOL_CALLS]add{}")
    assert isinstance(call, MalformedCall) and call.reason == "no [ARGS] after the tool's name"


@given(st.text(max_size=300))
def test_parsers_never_raise(text):
    for fmt in FORMATS.values():
        for call in fmt.parse(text):
            assert isinstance(call, (ToolCall, MalformedCall))


@pytest.mark.parametrize("template, fmt", [
    ("{% for tool in tools %}<tool_call>{{ tool }}</tool_call>{% endfor %}", "hermes"),
    ("{{ '[TOOL_CALLS]' }}{{ message.tool_calls | tojson }}", "mistral"),
    ("{{- '<|python_tag|>' + tool_call.name }}{{ '<|eom_id|>' }}", "llama3"),
    (None, "hermes"),
])
def test_detect_format(template, fmt):
    assert detect_format(template) == fmt
