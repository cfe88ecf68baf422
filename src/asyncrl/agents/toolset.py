"""Tools by name (``env.tools``): the built-in ones, or a function named by import path.

Separate from :mod:`asyncrl.agents.tools` because the built-in tools are built on it.
"""

from __future__ import annotations

from asyncrl.agents.tools import Tool
from asyncrl.core.import_path import resolve

__all__ = ["BUILTIN_TOOLS", "load_tools"]

BUILTIN_TOOLS = ("calculator", "python")
# the calculator is the calculator integration's, named by import path as a registry names its
# entries: the engine does not import the integrations (asyncrl.envs)
CALCULATOR = "asyncrl.envs.calculator:calculator"


def _load_one(spec: str, python_limits) -> Tool:
    if spec == "calculator":
        return Tool.from_function(resolve(CALCULATOR))
    if spec == "python":
        from asyncrl.agents.python_tool import PythonLimits, python_tool

        return python_tool(python_limits or PythonLimits())
    path = spec if ":" in spec else ":".join(spec.rsplit(".", 1))  # "package.module.function" too
    module_name, _, attr = path.rpartition(":")
    if not module_name or not attr:
        raise ValueError(f"tool {spec!r}: not a built-in ({', '.join(BUILTIN_TOOLS)}) nor "
                         "'package.module:function'")
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
    """The tools named by ``specs``: a built-in (``"calculator"``, ``"python"``) or an import path,
    ``"package.module:function"``, ``"package.module.function"`` or ``"path/to/file.py:function"``
    (resolved as ``reward.funcs`` paths are, a pickled ``.pkl:name`` from :func:`asyncrl.train`
    included; an attribute that already is a :class:`Tool` is used as it is). ``python_limits``: the ``python`` tool's
    :class:`~asyncrl.agents.python_tool.PythonLimits` (None: the defaults). One-line ValueError for
    a spec that names nothing usable."""
    return [_load_one(spec, python_limits) for spec in specs]
