"""A tool call's arguments checked against the tool's JSON schema, and converted where nothing is lost.

Models write ``{"a": "2", "b": "3"}`` for integer parameters; passed on as they are, Python's ``+``
returns ``"23"`` and the model learns from a wrong observation. :func:`conform` converts what has
one exact reading (``"2"`` to ``2``, ``"true"`` to ``True``, ``3`` to ``"3"`` for a string) and
refuses the rest with a line the model reads as its observation. Only the schema's top-level
``type`` and ``enum`` of each argument are checked: nested items are the tool's business.
"""

from __future__ import annotations

import math
import re

__all__ = ["conform"]

_INTEGER = re.compile(r"[+-]?\d{1,100}")
_BOOLEANS = {"true": True, "false": False}


def _describe(value: object) -> str:
    text = repr(value)
    kind = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array",
            dict: "object", type(None): "null"}.get(type(value), type(value).__name__)
    return f"the {kind} {text[:40]}{'…' if len(text) > 40 else ''}"


def _as_integer(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INTEGER.fullmatch(value.strip()):
        return int(value.strip())
    return None


def _as_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
        return number if math.isfinite(number) else None
    return None


def _as_string(value):
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return None


_CONVERT = {
    "integer": _as_integer,
    "number": _as_number,
    "string": _as_string,
    "boolean": lambda v: v if isinstance(v, bool) else _BOOLEANS.get(v.strip().lower()) if isinstance(v, str) else None,
    "array": lambda v: v if isinstance(v, list) else None,
    "object": lambda v: v if isinstance(v, dict) else None,
    "null": lambda v: v if v is None else None,
}


def _conform_one(value, spec: dict):
    """``(converted, None)`` or ``(None, why not)`` for one argument under its schema ``spec``."""
    types = spec.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    if value is None and (spec.get("nullable") or "null" in types):
        return None, None
    converted, matched = value, not types
    for kind in types:
        convert = _CONVERT.get(kind)
        if convert is None:  # a type this check does not know: the tool decides
            matched = True
            break
        result = convert(value)
        if result is not None:
            converted, matched = result, True
            break
    if not matched:
        return None, f"must be {' or '.join(types)}, not {_describe(value)}"
    if "enum" in spec and converted not in spec["enum"]:
        return None, f"must be one of {', '.join(map(repr, spec['enum']))}, not {_describe(value)}"
    return converted, None


def conform(arguments: dict, schema: dict) -> tuple[dict, str | None]:
    """``arguments`` converted to the types ``schema`` (OpenAI form, as :class:`Tool` holds it)
    gives its parameters: ``(converted arguments, None)``, or ``(arguments, "argument 'a' must be
    integer, not the string '2x'")``. Arguments the schema does not name pass unchanged (the
    signature check refuses unknown ones)."""
    properties = (schema.get("function", {}).get("parameters") or {}).get("properties") or {}
    converted = dict(arguments)
    for name, value in arguments.items():
        spec = properties.get(name)
        if not isinstance(spec, dict):
            continue
        converted[name], problem = _conform_one(value, spec)
        if problem is not None:
            return arguments, f"argument {name!r} {problem}"
    return converted, None
