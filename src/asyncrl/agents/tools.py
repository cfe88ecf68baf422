"""Tools an agent episode can call: parsing the model's calls, describing tools, running them.

* :func:`parse_tool_calls` reads the Qwen / Hermes form the chat templates of those models teach::

      <tool_call>
      {"name": "calculator", "arguments": {"expression": "2 + 2"}}
      </tool_call>

  A call the model garbled is a :class:`MalformedCall`, not an exception: it is part of what the
  model did and the episode answers it with an error observation, so the model can learn from it.
* :class:`Tool` pairs a function with the JSON schema ``tokenizer.apply_chat_template(tools=...)``
  shows the model; :meth:`Tool.from_function` builds it from type hints and the docstring.
* :class:`ToolBox` runs calls and never raises for anything the tool or the model did: an unknown
  name, bad arguments, an exception, ``sys.exit``, a hang all become a :class:`ToolResult` with
  ``failed=True`` whose ``content`` is the observation the model sees next. A call may be given
  the episode's own functions for some tools (``ToolBox.call(call, functions)``: an environment's
  tools that act on its state, asyncrl.agents.env), which run in place of those tools' functions.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import inspect
import json
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from asyncrl.agents.tool_args import conform
from asyncrl.core.user_code import Exited, TimedOut, first_line, in_thread

__all__ = ["MalformedCall", "Tool", "ToolBox", "ToolCall", "ToolError", "ToolResult", "parse_tool_calls"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
REASONS = ("ok", "unknown_tool", "malformed", "bad_arguments", "raised", "timeout", "no_result")
MALFORMED, UNKNOWN = "<malformed>", "<unknown>"  # counter keys for calls that name no known tool


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a tool name and its keyword arguments."""

    name: str
    arguments: dict


@dataclass(frozen=True)
class MalformedCall:
    """A ``<tool_call>`` block that could not be read as a call. ``text`` is the whole block as the
    model wrote it (tags included); ``reason`` one line saying what is wrong with it."""

    text: str
    reason: str


def _json_error(err: BaseException) -> str:
    if isinstance(err, json.JSONDecodeError):
        return f"{err.msg} at char {err.pos}"
    if isinstance(err, RecursionError):  # json.loads("[" * 100_000) recurses past the limit
        return "nested too deeply"
    return first_line(str(err)) or type(err).__name__  # e.g. an integer of more than 4300 digits


def _read_call(block: str, body: str) -> ToolCall | MalformedCall:
    """The call in one ``<tool_call>`` block's body (the text between the tags)."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError) as err:
        return MalformedCall(block, f"not JSON: {_json_error(err)}")
    return call_from_object(block, data)


def call_from_object(block: str, data, args_keys: tuple[str, ...] = ("arguments",)) -> ToolCall | MalformedCall:
    """The call a decoded JSON value ``data`` describes: a ``name`` and its arguments under the
    first of ``args_keys`` present (Llama 3 writes ``parameters``); ``block`` is the text it came
    from, kept in a :class:`MalformedCall`."""
    if not isinstance(data, dict):
        return MalformedCall(block, f"not a JSON object but {type(data).__name__}")
    if "name" not in data:
        return MalformedCall(block, "no 'name' field")
    name = data["name"]
    if not isinstance(name, str) or not name.strip():
        return MalformedCall(block, "'name' is not a non-empty string")
    arguments = next((data[k] for k in args_keys if k in data), None)
    if arguments is None:  # a tool without parameters: some models leave the field out
        arguments = {}
    if isinstance(arguments, str):  # some models send the arguments JSON-encoded a second time
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError) as err:
            return MalformedCall(block, f"'arguments' is a string but not JSON: {_json_error(err)}")
    if not isinstance(arguments, dict):
        return MalformedCall(block, f"'arguments' is not an object but {type(arguments).__name__}")
    return ToolCall(name.strip(), arguments)


def parse_tool_calls(text: str) -> list[ToolCall | MalformedCall]:
    """Every ``<tool_call>...</tool_call>`` block in ``text``, in order; [] when there is none.

    Whitespace around the JSON is ignored. An opening tag never closed (the model stopped, or ran
    out of tokens) is a :class:`MalformedCall` holding the rest of the text. A stray closing tag is
    ignored. Never raises, for any string: a model's output is data, not trusted input. The form
    has no escape for the closing tag: a ``</tool_call>`` inside a JSON string ends the block there
    (and the call reads as malformed), as it does for the models' own templates.
    """
    if not isinstance(text, str):
        return []
    calls: list[ToolCall | MalformedCall] = []
    pos = 0
    while (start := text.find(_OPEN, pos)) >= 0:
        body_start = start + len(_OPEN)
        end = text.find(_CLOSE, body_start)
        if end < 0:
            calls.append(MalformedCall(text[start:], "unclosed <tool_call>"))
            break
        pos = end + len(_CLOSE)
        calls.append(_read_call(text[start:pos], text[body_start:end].strip()))
    return calls


def _import_path(fn: Callable) -> str:
    module = getattr(fn, "__module__", None) or "?"
    return f"{module}.{getattr(fn, '__qualname__', None) or getattr(fn, '__name__', repr(fn))}"


@dataclass
class Tool:
    """A callable the model may call by ``name``; ``schema`` is what the chat template shows it
    (OpenAI form). ``timeout_s``: this tool's time limit; None takes the :class:`ToolBox`'s."""

    name: str
    function: Callable
    schema: dict
    timeout_s: float | None = None

    @classmethod
    def from_function(cls, fn: Callable, *, name: str | None = None, timeout_s: float | None = None) -> Tool:
        """The tool for ``fn``, its schema built by ``transformers.utils.get_json_schema``: the
        same function the chat templates' own ``tools=[fn]`` path uses, so what the model sees is
        what it would see there. ``fn`` needs a type hint on every argument and a Google-style
        docstring: a description, then an ``Args:`` line per argument. ``async def`` is fine."""
        from transformers.utils import get_json_schema

        try:
            schema = get_json_schema(fn)
        except Exception as err:  # noqa: BLE001 - any failure of the schema is the function's form
            raise ValueError(
                f"tool {_import_path(fn)}: every argument needs a type hint and an 'Args:' line in the "
                f"docstring ({first_line(err)})") from None
        if name is not None:
            schema = {**schema, "function": {**schema["function"], "name": name}}
        return cls(name=schema["function"]["name"], function=fn, schema=schema, timeout_s=timeout_s)


class ToolError(Exception):
    """Raised by a tool whose call failed but whose own text is what the model should read (the
    ``python`` tool's traceback or kill report): the call counts as failed (``failed=True``, so a
    reward that checks it cannot be paid for a crash) and ``observation`` is shown, cut to
    ``max_chars``, instead of a bare ``error:`` line."""

    def __init__(self, observation: str):
        super().__init__(observation)
        self.observation = observation


@dataclass(frozen=True)
class ToolResult:
    """What one call gave. ``content`` is the observation shown to the model (an ``error: ...``
    line when ``failed``); ``reason`` one of ``REASONS``; ``truncated`` when ``content`` was cut;
    ``latency_s``: the call's wall time, checks included."""

    name: str
    content: str
    failed: bool
    reason: str
    truncated: bool = False
    latency_s: float = field(default=0.0, compare=False)  # a measurement, not part of what the call gave


def _to_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


def _call_in_thread(fn: Callable, arguments: dict,
                    timeout_s: float | None) -> tuple[str | None, BaseException | None]:
    """``fn(**arguments)`` in a thread of its own (:func:`asyncrl.core.user_code.in_thread`):
    ``(text, None)``, or ``(None, what it raised)``, ``sys.exit`` included; :class:`TimedOut` past
    ``timeout_s``. Whatever the wait itself raises (Ctrl-C while waiting) is the caller's own. A tool
    that must stop even inside C code should work in a subprocess it can kill (the ``python`` tool does)."""
    future = in_thread(lambda: fn(**arguments), (), timeout_s, name=f"tool-{getattr(fn, '__name__', 'call')}")
    # an async tool is cancelled inside the thread at timeout_s; the margin lets that report
    # first, and still bounds a coroutine that blocks its loop (time.sleep in an async def)
    grace = 0.5 if timeout_s is not None and inspect.iscoroutinefunction(fn) else 0.0
    concurrent.futures.wait([future], timeout=None if timeout_s is None else timeout_s + grace)
    err = future.exception() if future.done() else TimedOut()
    if isinstance(err, TimedOut):
        raise TimedOut()
    if err is not None:
        return None, err.error if isinstance(err, Exited) else err
    value = future.result()
    try:
        return (None if value is None else _to_text(value)), None
    except Exception as text_err:  # noqa: BLE001 - a value whose str() fails is the tool's error
        return None, text_err


class ToolBox:
    """The tools of an episode, by name. :meth:`call` runs one call and never raises for what the
    tool or the model did; counters of calls, failures and truncations per tool name are kept for
    the run's metrics (:meth:`take_counts`). Safe to call from several threads at once."""

    def __init__(self, tools: list[Tool], *, timeout_s: float = 10.0, max_chars: int = 2000):
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ValueError(f"two tools are named {tool.name!r}: tool names must be unique")
            self.tools[tool.name] = tool
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.calls: dict[str, int] = {}
        self.failures: dict[str, int] = {}
        self.truncated: dict[str, int] = {}
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()

    @property
    def schemas(self) -> list[dict]:
        """The tools' schemas, for ``tokenizer.apply_chat_template(..., tools=box.schemas)``."""
        return [tool.schema for tool in self.tools.values()]

    @property
    def names(self) -> list[str]:
        return list(self.tools)

    def call(self, call: ToolCall | MalformedCall, functions: Mapping[str, Callable] | None = None) -> ToolResult:
        """Run one call. Failures come back as ``failed`` results whose content is an ``error:``
        line; only the caller's own interrupts (Ctrl-C while waiting) propagate. ``functions``: the
        episode's own callables by tool name, which run those tools' calls in place of the tools'
        functions (same schemas, limits and counters)."""
        started = time.perf_counter()
        result = self._call(call, functions or {})
        result = dataclasses.replace(result, latency_s=time.perf_counter() - started)
        key = {"malformed": MALFORMED, "unknown_tool": UNKNOWN}.get(result.reason, result.name)
        with self._lock:
            self.calls[key] = self.calls.get(key, 0) + 1
            self.seconds[key] = self.seconds.get(key, 0.0) + result.latency_s
            if result.failed:
                self.failures[key] = self.failures.get(key, 0) + 1
            if result.truncated:
                self.truncated[key] = self.truncated.get(key, 0) + 1
        return result

    def _call(self, call: ToolCall | MalformedCall, functions: Mapping[str, Callable]) -> ToolResult:
        if isinstance(call, MalformedCall):
            return ToolResult(MALFORMED, f"error: malformed tool call ({call.reason})", True, "malformed")
        if not isinstance(call, ToolCall):
            return ToolResult(MALFORMED, f"error: malformed tool call (not a call: {type(call).__name__})",
                              True, "malformed")
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(self.tools) or "none"
            return ToolResult(call.name, f"error: unknown tool {call.name[:100]!r} (available: {available})",
                              True, "unknown_tool")
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        function = functions.get(tool.name, tool.function)
        try:
            inspect.signature(function).bind(**arguments)
        except TypeError as err:
            return ToolResult(tool.name, f"error: {tool.name}: {first_line(str(err))}", True, "bad_arguments")
        except ValueError:  # no signature to check against (some builtins): the call itself will tell
            pass
        arguments, problem = conform(arguments, tool.schema)
        if problem is not None:  # "2" for an int: converted above; "2x" refused here, never concatenated
            return ToolResult(tool.name, f"error: {tool.name}: {problem}", True, "bad_arguments")
        timeout_s = tool.timeout_s if tool.timeout_s is not None else self.timeout_s
        try:
            content, err = _call_in_thread(function, arguments, timeout_s)
        except TimedOut:
            return ToolResult(tool.name, f"error: {tool.name} timed out after {timeout_s:g} s", True, "timeout")
        if err is None and content is None:
            return ToolResult(tool.name, f"error: {tool.name} returned None: it must return its result",
                              True, "no_result")
        if isinstance(err, ToolError):
            return dataclasses.replace(self._cut(tool.name, _to_text(err.observation)), failed=True, reason="raised")
        if err is not None:  # the tool's own, from its thread: sys.exit and KeyboardInterrupt too
            return ToolResult(tool.name, f"error: {tool.name} raised {first_line(err)}", True, "raised")
        return self._cut(tool.name, content)

    def _cut(self, name: str, content: str) -> ToolResult:
        """``content`` cut to ``max_chars``, with a marker saying how much went: a tool that prints
        a whole file must not fill the model's context."""
        if len(content) <= self.max_chars:
            return ToolResult(name, content, False, "ok")
        cut = len(content) - self.max_chars
        return ToolResult(name, content[:self.max_chars] + f"…[truncated {cut} chars]", False, "ok",
                          truncated=True)

    def take_counts(self) -> dict[str, dict]:
        """The counters since the last take, reset: ``{"calls", "failures", "truncated", "seconds"}``,
        each per tool name (``"<malformed>"``, ``"<unknown>"`` for calls that name no known tool)."""
        with self._lock:
            counts = {"calls": self.calls, "failures": self.failures, "truncated": self.truncated,
                      "seconds": self.seconds}
            self.calls, self.failures, self.truncated, self.seconds = {}, {}, {}, {}
        return counts
