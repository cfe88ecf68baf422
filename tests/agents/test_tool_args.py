"""Tool calls as models write them: arguments converted against the schema where one reading is
exact and refused otherwise (never ``"2" + "3" == "23"``), a tool that returns None is a failed
call, and two tools of one name are refused when the config loads."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from asyncrl.agents.tool_args import conform
from asyncrl.agents.tools import Tool, ToolBox, ToolCall, ToolResult


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first.
        b: The second.
    """
    return a + b


def scale(x: float, unit: str, exact: bool) -> str:
    """Scale a number.

    Args:
        x: The number.
        unit: Its unit.
        exact: Whether to round.
    """
    return f"{x!r} {unit} {exact!r}"


def forgets(text: str) -> str:
    """Forget to return.

    Args:
        text: Anything.
    """
    text.upper()


BOX = ToolBox([Tool.from_function(add), Tool.from_function(scale), Tool.from_function(forgets)])


def test_string_integers_are_converted_not_concatenated():
    assert BOX.call(ToolCall("add", {"a": "2", "b": "3"})) == ToolResult("add", "5", False, "ok")
    assert BOX.call(ToolCall("add", {"a": " -2 ", "b": 3.0})).content == "1"


@pytest.mark.parametrize("arguments, problem", [
    ({"a": "2x", "b": 3}, "argument 'a' must be integer, not the string '2x'"),
    ({"a": 2.5, "b": 3}, "argument 'a' must be integer, not the number 2.5"),
    ({"a": True, "b": 3}, "argument 'a' must be integer, not the boolean True"),
    ({"a": [1], "b": 3}, "argument 'a' must be integer, not the array [1]"),
])
def test_arguments_without_an_exact_reading_are_refused(arguments, problem):
    result = BOX.call(ToolCall("add", arguments))
    assert result == ToolResult("add", f"error: add: {problem}", True, "bad_arguments")


def test_numbers_strings_and_booleans():
    result = BOX.call(ToolCall("scale", {"x": "1.5", "unit": 7, "exact": "true"}))
    assert result.content == "1.5 7 True"
    result = BOX.call(ToolCall("scale", {"x": "nan", "unit": "m", "exact": False}))
    assert result.failed and result.content == "error: scale: argument 'x' must be number, not the string 'nan'"
    result = BOX.call(ToolCall("scale", {"x": 1, "unit": "m", "exact": "maybe"}))
    assert result.content == "error: scale: argument 'exact' must be boolean, not the string 'maybe'"


def test_enum_and_nullable():
    schema = {"function": {"parameters": {"properties": {
        "mode": {"type": "string", "enum": ["fast", "slow"]}, "n": {"type": "integer", "nullable": True}}}}}
    assert conform({"mode": "fast", "n": None}, schema) == ({"mode": "fast", "n": None}, None)
    assert conform({"mode": "warp"}, schema)[1] == "argument 'mode' must be one of 'fast', 'slow', not the string 'warp'"


@given(st.integers(min_value=-10**30, max_value=10**30))
def test_any_integer_written_as_a_string_reads_back(n):
    schema = {"function": {"parameters": {"properties": {"a": {"type": "integer"}}}}}
    assert conform({"a": str(n)}, schema) == ({"a": n}, None)


def test_a_tool_that_returns_none_is_failed():
    result = BOX.call(ToolCall("forgets", {"text": "x"}))
    assert result == ToolResult("forgets", "error: forgets returned None: it must return its result", True, "no_result")
    assert BOX.take_counts()["failures"]["forgets"] == 1


def test_two_tools_of_one_name_refused_at_config_load(tmp_path):
    from asyncrl.runtime.validate import load_run_config

    (tmp_path / "more_tools.py").write_text(
        'def calculator(expression: str) -> str:\n    """Mine.\n\n    Args:\n        expression: x.\n    """\n'
        "    return expression\n")
    with pytest.raises(ValueError, match=r"^config error: env\.tools\[1\]: .*more_tools\.py:calculator' is named 'calculator', "
                                         r"like env\.tools\[0\]; a call must name one function$"):
        load_run_config(None, ["env.tools=[calculator," + f"{tmp_path}/more_tools.py:calculator]"])
