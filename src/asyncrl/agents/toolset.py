"""Tools by name (``env.tools``): a built-in one out of :data:`TOOLS`, or a function named by import path.

Separate from :mod:`asyncrl.agents.tools` because the built-in tools are built on it. A new built-in
tool is one entry in :data:`TOOLS` (name → a builder called with the ``python`` tool's limits),
here or in a plugin module named in ``run.plugins``::

    from asyncrl.agents.toolset import TOOLS
    TOOLS["search"] = lambda limits: Tool.from_function(my_pkg.search)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asyncrl.agents.tools import Tool
from asyncrl.core.import_path import resolve
from asyncrl.core.registry import Registry, close_hint

__all__ = ["TOOLS", "load_tools"]

# the calculator is the calculator integration's, named by import path as a registry names its
# entries: the engine does not import the integrations (asyncrl.envs)
CALCULATOR = "asyncrl.envs.calculator:calculator"


def _calculator(limits: Any) -> Tool:
    return Tool.from_function(resolve(CALCULATOR))


def _python(limits: Any) -> Tool:
    from asyncrl.agents.python_tool import PythonLimits, python_tool

    return python_tool(limits or PythonLimits())


# name -> builder(python_limits: PythonLimits | None) -> Tool
TOOLS: Registry[Callable[[Any], Tool]] = Registry("env.tools", {"calculator": _calculator, "python": _python})


def _load_one(spec: str, python_limits) -> Tool:
    if spec in TOOLS:
        return TOOLS[spec](python_limits)
    path = spec if ":" in spec else ":".join(spec.rsplit(".", 1))  # "package.module.function" too
    module_name, _, attr = path.rpartition(":")
    if not module_name or not attr:
        raise ValueError(f"tool {spec!r}: not a built-in ({', '.join(TOOLS)}) nor "
                         f"'package.module:function'{close_hint(spec, TOOLS)}")
    try:
        obj = resolve(path)
    except ValueError as err:
        raise ValueError(f"tool {spec!r}: {err}") from None
    if isinstance(obj, Tool):
        return obj
    if not callable(obj):
        raise ValueError(f"tool {spec!r}: {attr!r} is not callable but {type(obj).__name__}")
    return Tool.from_function(obj)


def load_tools(specs: list[str], *, python_limits=None) -> list[Tool]:
    """The tools named by ``specs``: a built-in (a key of :data:`TOOLS`) or an import path,
    ``"package.module:function"``, ``"package.module.function"`` or ``"path/to/file.py:function"``
    (resolved as ``reward.funcs`` paths are, a pickled ``.pkl:name`` from :func:`asyncrl.train`
    included; an attribute that already is a :class:`Tool` is used as it is). ``python_limits``: the ``python`` tool's
    :class:`~asyncrl.agents.python_tool.PythonLimits` (None: the defaults). One-line ValueError for
    a spec that names nothing usable."""
    return [_load_one(spec, python_limits) for spec in specs]
