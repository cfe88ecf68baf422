"""asyncrl.agents.tools: parsing tool calls, schemas, the ToolBox's results and counters, loading
tools by name; asyncrl.envs.calculator: the calculator."""

import asyncio
import json
import re
import sys
import threading
import time

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from asyncrl.agents.tools import MalformedCall, Tool, ToolBox, ToolCall, ToolResult, parse_tool_calls
from asyncrl.envs.calculator import calculator
from asyncrl.agents.toolset import load_tools


def _block(payload: str) -> str:
    return f"<tool_call>\n{payload}\n</tool_call>"


# -- parse_tool_calls -------------------------------------------------------------------------------

def test_parse_one_call_with_surrounding_text():
    text = 'Let me compute.\n<tool_call>\n{"name": "calculator", "arguments": {"expression": "2+2"}}\n</tool_call>'
    assert parse_tool_calls(text) == [ToolCall("calculator", {"expression": "2+2"})]


def test_parse_several_calls_whitespace_tolerant():
    text = ('<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> then '
            '<tool_call>  \n\t {"name":"b","arguments":{}}  \n</tool_call>')
    assert parse_tool_calls(text) == [ToolCall("a", {"x": 1}), ToolCall("b", {})]


def test_parse_no_call():
    assert parse_tool_calls("") == []
    assert parse_tool_calls("The answer is 4. </tool_call>") == []  # a stray closing tag: ignored


def test_parse_arguments_as_json_string_or_missing():
    assert parse_tool_calls(_block('{"name": "f", "arguments": "{\\"x\\": 2}"}')) == [ToolCall("f", {"x": 2})]
    assert parse_tool_calls(_block('{"name": "f"}')) == [ToolCall("f", {})]
    assert parse_tool_calls(_block('{"name": "f", "arguments": null}')) == [ToolCall("f", {})]


@pytest.mark.parametrize("payload, reason", [
    ('{"name": "f", "arguments": {"x": 1}', "not JSON: Expecting ',' delimiter at char 35"),
    ('{"arguments": {}}', "no 'name' field"),
    ('["f", {}]', "not a JSON object but list"),
    ('{"name": 3}', "'name' is not a non-empty string"),
    ('{"name": "f", "arguments": [1, 2]}', "'arguments' is not an object but list"),
    ('{"name": "f", "arguments": "x=1"}', "'arguments' is a string but not JSON: Expecting value at char 0"),
    ('{"name": "f", "arguments": "[1]"}', "'arguments' is not an object but list"),
])
def test_parse_malformed(payload, reason):
    text = _block(payload)
    assert parse_tool_calls(text) == [MalformedCall(text, reason)]


def test_parse_unclosed_call_after_a_good_one():
    good = _block('{"name": "a", "arguments": {}}')
    calls = parse_tool_calls(good + ' and <tool_call>\n{"name": "b", "argu')
    assert calls == [ToolCall("a", {}), MalformedCall('<tool_call>\n{"name": "b", "argu', "unclosed <tool_call>")]


def test_parse_pathological_json_does_not_raise():
    (deep,) = parse_tool_calls(_block("[" * 100_000))
    assert isinstance(deep, MalformedCall) and deep.reason.startswith("not JSON")
    (huge,) = parse_tool_calls(_block('{"name": "f", "arguments": {"n": ' + "9" * 5000 + "}}"))
    assert isinstance(huge, MalformedCall) and huge.reason.startswith("not JSON")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('<tool_call>/{}[]":, \nnamearguments0x\\')) | st.characters(),
               max_size=200))
def test_parse_never_raises(text):
    calls = parse_tool_calls(text)
    assert all(isinstance(c, (ToolCall, MalformedCall)) for c in calls)
    assert len(calls) <= text.count("<tool_call>")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10)
                     | st.floats(allow_nan=False, allow_infinity=False),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(name=st.text(min_size=1, max_size=20).filter(lambda s: s.strip() == s and s.strip()),
       arguments=st.dictionaries(st.text(max_size=10), _json, max_size=4),
       as_string=st.booleans(), indent=st.sampled_from([None, 2]))
def test_parse_round_trips_a_well_formed_call(name, arguments, as_string, indent):
    payload = {"name": name, "arguments": json.dumps(arguments) if as_string else arguments}
    # a closing tag inside the JSON ends the block where the model's own would: not a round trip
    assume("</tool_call>" not in json.dumps(payload, indent=indent))
    text = "prefix " + _block(json.dumps(payload, indent=indent)) + " suffix"
    assert parse_tool_calls(text) == [ToolCall(name, arguments)]


# -- Tool.from_function ------------------------------------------------------------------------------

def add(a: int, b: float = 1.0) -> float:
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def no_hints(a, b):
    """Add two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def test_schema_from_a_typed_docstringed_function():
    tool = Tool.from_function(add)
    assert tool.name == "add" and tool.function is add and tool.timeout_s is None
    assert tool.schema == {"type": "function", "function": {
        "name": "add", "description": "Add two numbers.",
        "parameters": {"type": "object", "properties": {
            "a": {"type": "integer", "description": "The first number."},
            "b": {"type": "number", "description": "The second number."}}, "required": ["a"]},
        "return": {"type": "number"}}}
    renamed = Tool.from_function(add, name="plus", timeout_s=2.0)
    assert renamed.name == "plus" and renamed.schema["function"]["name"] == "plus" and renamed.timeout_s == 2.0
    assert tool.schema["function"]["name"] == "add"  # the original schema is left alone


def test_calculator_schema():
    schema = Tool.from_function(calculator).schema["function"]
    assert schema["name"] == "calculator"
    assert schema["parameters"]["required"] == ["expression"]
    assert "\n" not in schema["parameters"]["properties"]["expression"]["description"]


@pytest.mark.parametrize("fn, missing", [(no_hints, "TypeHintParsingException: Argument a is missing a type hint"),
                                         (lambda x: x, "DocstringParsingException")])
def test_from_function_one_line_error(fn, missing):
    with pytest.raises(ValueError) as info:
        Tool.from_function(fn)
    message = str(info.value)
    assert "\n" not in message and missing in message
    assert message.startswith(f"tool {fn.__module__}.{fn.__qualname__}: every argument needs a type hint")


# -- ToolBox ------------------------------------------------------------------------------------------

def shout(text: str) -> str:
    """Upper-case a text.

    Args:
        text: The text.
    """
    return text.upper()


def boom(n: int) -> str:
    """Fail.

    Args:
        n: Anything.
    """
    raise RuntimeError(f"bad n {n}\nsecond line")


def leave(code: int) -> str:
    """Exit.

    Args:
        code: The exit status.
    """
    sys.exit(code)


def sleepy(seconds: float) -> str:
    """Sleep.

    Args:
        seconds: How long.
    """
    time.sleep(seconds)
    return "awake"


async def async_sleepy(seconds: float) -> dict:
    """Sleep, asynchronously.

    Args:
        seconds: How long.
    """
    await asyncio.sleep(seconds)
    return {"slept": seconds}


def listing(n: int) -> list:
    """A list.

    Args:
        n: Its length.
    """
    return list(range(n))


def _box(**kwargs) -> ToolBox:
    tools = [Tool.from_function(f) for f in (shout, boom, leave, sleepy, async_sleepy, listing)]
    return ToolBox(tools, **kwargs)


def test_box_schemas_and_names():
    box = _box()
    assert box.names == ["shout", "boom", "leave", "sleepy", "async_sleepy", "listing"]
    assert [s["function"]["name"] for s in box.schemas] == box.names


def test_duplicate_names_refused():
    with pytest.raises(ValueError, match="^two tools are named 'shout': tool names must be unique$"):
        ToolBox([Tool.from_function(shout), Tool.from_function(shout)])


def test_ok_results_as_text():
    box = _box()
    assert box.call(ToolCall("shout", {"text": "hi"})) == ToolResult("shout", "HI", False, "ok")
    assert box.call(ToolCall("listing", {"n": 3})).content == "[0, 1, 2]"
    assert box.call(ToolCall("async_sleepy", {"seconds": 0})) == ToolResult("async_sleepy", '{"slept": 0}', False, "ok")


@pytest.mark.parametrize("call, expected", [
    (MalformedCall("<tool_call>{", "not JSON: Expecting property name enclosed in double quotes at char 1"),
     ToolResult("<malformed>", "error: malformed tool call (not JSON: Expecting property name enclosed in double "
                "quotes at char 1)", True, "malformed")),
    (ToolCall("nope", {}), ToolResult("nope", "error: unknown tool 'nope' (available: shout, boom, leave, sleepy, "
                                      "async_sleepy, listing)", True, "unknown_tool")),
    (ToolCall("shout", {"txt": "hi"}), ToolResult("shout", "error: shout: missing a required argument: 'text'",
                                                  True, "bad_arguments")),
    (ToolCall("shout", {"text": "a", "x": 1}), ToolResult("shout", "error: shout: got an unexpected keyword argument "
                                                          "'x'", True, "bad_arguments")),
    (ToolCall("shout", {"text": [3]}), ToolResult("shout", "error: shout: argument 'text' must be string, not the "
                                                  "array [3]", True, "bad_arguments")),
    (ToolCall("boom", {"n": 1}), ToolResult("boom", "error: boom raised RuntimeError: bad n 1", True, "raised")),
    (ToolCall("leave", {"code": 3}), ToolResult("leave", "error: leave raised SystemExit: 3", True, "raised")),
])
def test_failure_observations(call, expected):
    assert _box().call(call) == expected


def test_long_error_message_cut_to_200_chars():
    result = _box().call(ToolCall("boom", {"n": 10 ** 300}))
    assert result.content == "error: boom raised RuntimeError: " + f"bad n {10 ** 300}"[:200]


def test_truncation():
    box = _box(max_chars=10)
    result = box.call(ToolCall("shout", {"text": "x" * 25}))
    assert result == ToolResult("shout", "X" * 10 + "…[truncated 15 chars]", False, "ok", truncated=True)
    assert box.call(ToolCall("shout", {"text": "x" * 10})).truncated is False


def test_sync_tool_timeout_abandons_the_thread():
    box = _box(timeout_s=0.2)
    t0 = time.monotonic()
    result = box.call(ToolCall("sleepy", {"seconds": 5}))
    assert time.monotonic() - t0 < 2
    assert result == ToolResult("sleepy", "error: sleepy timed out after 0.2 s", True, "timeout")


def test_async_tool_timeout_and_the_tools_own_limit():
    box = ToolBox([Tool.from_function(async_sleepy, timeout_s=0.2)], timeout_s=30)
    t0 = time.monotonic()
    result = box.call(ToolCall("async_sleepy", {"seconds": 5}))
    assert time.monotonic() - t0 < 2
    assert result == ToolResult("async_sleepy", "error: async_sleepy timed out after 0.2 s", True, "timeout")


def test_tools_own_timeout_error_is_raised_not_timeout():
    async def late(x: int) -> str:
        """Raise TimeoutError itself.

        Args:
            x: Anything.
        """
        raise TimeoutError("upstream slow")

    result = ToolBox([Tool.from_function(late)]).call(ToolCall("late", {"x": 1}))
    assert (result.reason, result.content) == ("raised", "error: late raised TimeoutError: upstream slow")


def test_async_tool_called_inside_a_running_loop_and_from_a_thread():
    box = _box()

    async def in_loop():
        return box.call(ToolCall("async_sleepy", {"seconds": 0.01}))

    assert asyncio.run(in_loop()).content == '{"slept": 0.01}'
    out = []
    thread = threading.Thread(target=lambda: out.append(box.call(ToolCall("async_sleepy", {"seconds": 0}))))
    thread.start()
    thread.join()
    assert out[0].content == '{"slept": 0}'


def test_counters_and_take_counts():
    box = _box(max_chars=3)
    for call in (ToolCall("shout", {"text": "hi"}), ToolCall("shout", {"text": "long"}), ToolCall("boom", {"n": 1}),
                 ToolCall("nope", {}), ToolCall("nope2", {}), MalformedCall("<tool_call>", "unclosed <tool_call>")):
        box.call(call)
    assert box.calls == {"shout": 2, "boom": 1, "<unknown>": 2, "<malformed>": 1}
    assert box.failures == {"boom": 1, "<unknown>": 2, "<malformed>": 1}
    counts = box.take_counts()
    seconds = counts.pop("seconds")  # each call's wall time, summed per name
    assert counts == {"calls": {"shout": 2, "boom": 1, "<unknown>": 2, "<malformed>": 1},
                      "failures": {"boom": 1, "<unknown>": 2, "<malformed>": 1},
                      "truncated": {"shout": 1}}
    assert seconds.keys() == counts["calls"].keys() and all(s >= 0 for s in seconds.values())
    assert box.take_counts() == {"calls": {}, "failures": {}, "truncated": {}, "seconds": {}}


# -- load_tools ---------------------------------------------------------------------------------------

def test_load_builtins_and_import_paths():
    calc, py, sh, sh2 = load_tools(["calculator", "python", f"{__name__}:shout", f"{__name__}.shout"])
    assert calc.name == "calculator" and calc.function is calculator
    assert py.name == "python" and py.schema["function"]["parameters"]["required"] == ["code"]
    assert sh.function is shout and sh2.function is shout


@pytest.mark.parametrize("spec, message", [
    ("no_such_module_xyz:f", "tool 'no_such_module_xyz:f': cannot import 'no_such_module_xyz:f': ModuleNotFoundError: "
                             "No module named 'no_such_module_xyz' (a module must be importable, e.g. from the current "
                             "directory; a script's file can be named as path/to/file.py:fn)"),
    ("json:no_such_fn", "tool 'json:no_such_fn': cannot import 'json:no_such_fn': json has no attribute 'no_such_fn'"),
    ("calculater", "tool 'calculater': not a built-in (calculator, python) nor 'package.module:function' "
                   "(did you mean 'calculator'?)"),
    ("json:__doc__", "tool 'json:__doc__': '__doc__' is not callable but str"),
])
def test_load_errors_are_one_line(spec, message):
    with pytest.raises(ValueError) as info:
        load_tools([spec])
    assert str(info.value) == message


# -- calculator ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("expression, value", [
    ("48213 * 9127", "440040051"),
    ("123456789123456789 * 987654321987654321", str(123456789123456789 * 987654321987654321)),
    ("2 ** 64", "18446744073709551616"),
    ("10 / 4", "2.5"), ("10 / 5", "2"), ("1 / 3", repr(1 / 3)), ("7 // 2", "3"), ("-7 % 3", "2"),
    ("-(3 + 4) ** 2", "-49"), ("2 ** -3", "0.125"), ("1.5 * 2", "3"), (" 2 ** 0.5 ", repr(2 ** 0.5)),
])
def test_calculator_values(expression, value):
    assert calculator(expression) == value


@pytest.mark.parametrize("expression, message", [
    ("1 / 0", "division by zero"),
    ("x + 1", "not allowed in an expression: name 'x'"),
    ("__import__('os').system('true')", "not allowed in an expression: Call"),
    ("(1).real", "not allowed in an expression: Attribute"),
    ("True + 1", "not allowed in an expression: constant True"),
    ("1 +", "not an arithmetic expression"),
    ("2 ** 65", "exponent 65 is larger than 64"),
    ("9 ** 9 ** 9", "is larger than 64"),
    ("(10 ** 60) ** 60", "more than 1000 digits"),
    ("10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 "
     "* 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64 * 10 ** 64", "more than 1000 digits"),
    ("1e308 * 10", "not a finite number"),
    ("(-8) ** (1 / 3)", "no real value"),
    ("1" * 1001, "limit is 1000"),
])
def test_calculator_refuses(expression, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        calculator(expression)


def test_calculator_error_through_the_toolbox():
    box = ToolBox(load_tools(["calculator"]))
    assert box.call(ToolCall("calculator", {"expression": "48213 * 9127"})).content == "440040051"
    result = box.call(ToolCall("calculator", {"expression": "1/0"}))
    assert (result.reason, result.content) == ("raised", "error: calculator raised ValueError: division by zero")
