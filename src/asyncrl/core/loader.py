"""Generic typed loading of nested dataclasses from YAML + dotted overrides.

Why not OmegaConf/Hydra: we need exactly three behaviours and one-line errors that name the key —
unknown keys rejected, values type-checked against the annotations, and each dataclass's own
``validate()`` run at load time. This file knows nothing about asyncrl's components.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import math
import os
import re
import types
import typing
from pathlib import Path
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from asyncrl.core.errors import AsyncRLError
from asyncrl.core.registry import Registry, refusal

import yaml

T = TypeVar("T")
_FLOAT_RE = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class ConfigError(AsyncRLError, ValueError):
    """A bad configuration value. ``str(err)`` is one line that names the key."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"config error: {key}: {message}" if key else f"config error: {message}")


def guarded(command: "Callable[[], int]") -> int:
    """Exit status of a command-line entry point: a ConfigError becomes one line on stderr and
    status 2, Ctrl-C status 130, a second stop signal during a run 128 + its number (143 for
    SIGTERM, like the first); no traceback for any."""
    import sys

    try:
        return command()
    except ConfigError as err:
        # under torchrun every rank reads the config and finds the same error: rank 0 says it (an
        # error of one rank's own, ``every_rank = False``, is said by that rank)
        if os.environ.get("RANK", "0") in ("", "0") or not getattr(err, "every_rank", True):
            print(f"asyncrl: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        code = getattr(stop, "exit_code", None)  # asyncrl.runtime.signals.StopNow carries its signal
        print("asyncrl: interrupted" + (f" by a second {stop} (no checkpoint)" if code else ""), file=sys.stderr)
        return code or 130
    except OSError as err:  # a full disk where no writer named its file (asyncrl.core.disk.DiskFull does)
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        print(f"asyncrl: no space left on device writing {err.filename or 'a file of the run'}", file=sys.stderr)
        return 2


def setting(default: Any = dataclasses.MISSING, help: str = "", *,
            factory: Any = dataclasses.MISSING, names: Registry | Callable[[], Iterable[str]] | str | None = None,
            also: tuple[str, ...] = ()) -> Any:
    """A dataclass field with its one-line description, which ``asyncrl train --help`` and
    ``asyncrl config`` print: ``lr: float = setting(3e-5, "AdamW learning rate")``.

    ``names``: the field holds a name out of a registry (:class:`~asyncrl.core.registry.Registry`):
    the registry itself (``names=MODES``), or its import path ``"module:attr"`` for a registry that
    lives above the config (``names="asyncrl.objectives:LOSSES"``): a string names it without
    importing it (a callable giving the accepted names is taken too). ``also``: the words the field
    accepts besides the registry's names (``auto``, ``none``). Asked when the run's config is checked
    (:func:`check_names`, after the plugins are imported, so it sees what they registered) and when
    the keys are described."""
    return dataclasses.field(default=default, default_factory=factory,
                             metadata={"help": help, "names": names, "also": also})


def field_help(f: dataclasses.Field) -> str:
    return f.metadata.get("help", "")


def field_registry(f: dataclasses.Field) -> Any:
    """What ``setting(names=...)`` of ``f`` names, imported now (a Registry, or a callable or
    iterable of names); None for other fields."""
    names = f.metadata.get("names")
    if isinstance(names, str):
        from asyncrl.core.import_path import resolve

        names = resolve(names)
    return names


def field_names(f: dataclasses.Field) -> list[str] | None:
    """The names a registry-backed field accepts now (see :func:`setting`), a family shown as
    ``gem:<id>``; None for other fields."""
    names = field_registry(f)
    if names is None:
        return None
    also = list(f.metadata.get("also", ()))
    if isinstance(names, Registry):
        return [*also, *names.names()]
    return [*also, *(names() if callable(names) else names)]


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Check ``value`` against annotation ``tp``; the only conversions are int→float and
    dataclass-from-dict (YAML gives ``1`` for a float field)."""
    origin = get_origin(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        args = get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key)
            except ConfigError as err:
                errors.append(err)
        raise ConfigError(key, f"expected {' or '.join(_type_name(a) for a in args)}, got {value!r}")
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(key, f"must be one of {', '.join(map(str, choices))}; got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping, got {value!r}")
        return dict(value)
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(key, f"expected a list, got {value!r}")
        (item_tp, *_) = get_args(tp) or (Any,)
        items = [_coerce(v, item_tp, f"{key}[{i}]") for i, v in enumerate(value)]
        return items if origin is list else tuple(items)
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(key, f"expected a mapping, got {value!r}")
        return from_dict(tp, value, prefix=key)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(key, f"expected true/false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(key, f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, str) and _FLOAT_RE.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads "1e-4" (no dot) as a string
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(key, f"expected a number, got {value!r}")
        # no setting means NaN or infinity: a NaN limit passes every `x > 0` check and then
        # poisons what it touches (a NaN grad_clip put NaN into every weight)
        if not math.isfinite(value):
            raise ConfigError(key, f"expected a finite number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(key, f"expected a string, got {value!r}")
        return value
    raise ConfigError(key, f"unsupported annotation {_type_name(tp)}")


def from_dict(cls: type[T], data: dict[str, Any], prefix: str = "") -> T:
    """Build dataclass ``cls`` from a nested dict, rejecting unknown keys and wrong types, then
    calling ``validate()`` on every level (post-order, so children are valid first)."""
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls) if f.init}
    kwargs = {}
    for key, value in data.items():
        full = f"{prefix}.{key}" if prefix else str(key)
        # a field named after a Python keyword carries a trailing underscore (``async_``); its
        # config key is the plain word
        attr = key if key in names and not str(key).endswith("_") else f"{key}_"
        if attr not in names:
            raise ConfigError(full, f"unknown key (known: {', '.join(sorted(public_name(n) for n in names))})")
        kwargs[attr] = _coerce(value, hints[attr], full)
    try:
        obj = cls(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as err:
        raise ConfigError(prefix, str(err)) from None
    if not prefix:  # validate once, from the root, after the whole tree is built
        validate_tree(obj)
    return obj


def public_name(attr: str) -> str:
    return attr[:-1] if attr.endswith("_") else attr


def validate_tree(obj: Any, prefix: str = "") -> None:
    """Run ``validate()`` on ``obj`` (a dataclass) and its nested dataclasses; a ValueError raised
    as ``ValueError("field: message")`` becomes a ConfigError naming ``prefix.field``. A
    registry-backed field (``setting(names=...)``) is not checked here: a plugin may register its
    name later (:func:`check_names`), so ``validate()`` never looks a name up."""
    for f in dataclasses.fields(obj):
        child = getattr(obj, f.name)
        if dataclasses.is_dataclass(child):
            name = public_name(f.name)
            validate_tree(child, f"{prefix}.{name}" if prefix else name)
    validate = getattr(obj, "validate", None)
    if validate is None:
        return
    with named_errors(prefix):
        validate()


@contextlib.contextmanager
def named_errors(prefix: str = "") -> Iterator[None]:
    """A ValueError raised inside as ``ValueError("field: message")`` leaves as a ConfigError naming
    ``prefix.field`` (a ConfigError passes as it is)."""
    try:
        yield
    except ConfigError:
        raise
    except ValueError as err:
        field, sep, message = str(err).partition(": ")
        if not sep:
            field, message = "", str(err)
        full = ".".join(p for p in (prefix, field) if p)
        raise ConfigError(full, message) from None


def check_names(obj: Any, prefix: str = "") -> None:
    """ConfigError naming the key of the first registry-backed field (``setting(names=...)``) of
    ``obj`` and its nested dataclasses whose value is not one of the names registered now (each
    section's fields before its nested sections', as :func:`validate_tree` visits them): the
    registry's one line (:meth:`Registry.why_not`: the known names, close matches, or why a
    family refuses that id)."""
    for f in dataclasses.fields(obj):
        child = getattr(obj, f.name)
        if dataclasses.is_dataclass(child):
            check_names(child, ".".join(p for p in (prefix, public_name(f.name)) if p))
    for f in dataclasses.fields(obj):
        names = field_registry(f)
        if names is None:
            continue
        value = getattr(obj, f.name)
        if isinstance(names, Registry):
            why = names.why_not(value, f.metadata.get("also", ()))
        else:
            known = field_names(f) or []
            why = None if value in known else refusal(value, known)
        if why is not None:
            raise ConfigError(".".join(p for p in (prefix, public_name(f.name)) if p), why)


def to_dict(obj: Any) -> dict[str, Any]:
    """Nested plain dict with the config-file key names (``async``, not ``async_``)."""
    def rename(value: Any) -> Any:
        if isinstance(value, dict):
            return {public_name(k): rename(v) for k, v in value.items()}
        return value

    return rename(dataclasses.asdict(obj))


def parse_override(text: str, root: type | None = None) -> tuple[list[str], Any]:
    """``a.b.c=value`` → (["a", "b", "c"], value). With ``root`` (the config dataclass) the value
    is read by the type of the field it sets (:func:`parse_value`); without, as YAML. ``key=``
    gives an empty string."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(text, "override must look like dotted.key=value")
    parts = key.strip().split(".")
    if any(not p for p in parts):
        raise ConfigError(key, "empty component in dotted key")
    target = field_type(root, parts) if root is not None else None
    return parts, parse_value(raw, target, key.strip())


def field_type(root: type, parts: list[str]) -> Any:
    """The annotation of dotted key ``parts`` inside dataclass ``root``; None when no field has
    that path (an unknown key, or one inside a mapping such as ``loss.params``)."""
    tp: Any = root
    for part in parts:
        if not dataclasses.is_dataclass(tp):
            return None
        names = {f.name for f in dataclasses.fields(tp) if f.init}
        attr = part if part in names and not part.endswith("_") else f"{part}_"
        if attr not in names:
            return None
        tp = get_type_hints(tp)[attr]
    return tp


_YAML_NULLS = ("null", "Null", "NULL", "~")


def parse_value(raw: str, tp: Any, key: str) -> Any:
    """Override text → value, by the annotation ``tp`` of the field it sets (None: unknown).

    A string (or string-choice) field takes the text as given, so ``{question}`` or ``a: b``
    stay text (a whole quoted scalar, ``"Q:\\nA:"``, is unquoted); a list takes ``a,b`` (each
    item read by the item type) or the YAML ``[a, b]``; ``X | None`` reads ``null`` as None, else
    as X; everything else (numbers, booleans, mappings, sections) is read as YAML, which is also
    what the checks in :func:`_coerce` expect."""
    origin = get_origin(tp)
    if tp is str:
        return _text(raw)
    if origin is Literal and all(isinstance(c, str) for c in get_args(tp)):
        return _text(raw.strip())
    if tp is float and _FLOAT_RE.fullmatch(raw.strip()):
        return float(raw)  # YAML 1.1 reads "1e-4" (no dot) as a string
    if origin in (list, tuple) and not raw.strip().startswith("["):
        (item_tp, *_) = get_args(tp) or (Any,)
        items = raw.split(",") if raw.strip() else []
        return [parse_value(item.strip(), item_tp, f"{key}[{i}]") for i, item in enumerate(items)]
    if origin in (typing.Union, types.UnionType):
        arms = [a for a in get_args(tp) if a is not type(None)]
        if len(arms) < len(get_args(tp)) and raw.strip() in _YAML_NULLS:
            return None
        for arm in sorted(arms, key=lambda a: a is str):  # text fits a str arm always: try it last
            try:
                value = parse_value(raw, arm, key)
                _coerce(value, arm, key)
                return value
            except ConfigError:
                continue
    return _yaml_value(raw, key)


def _text(raw: str) -> str:
    """A string field's text as given; one that is a whole quoted YAML scalar (``"Q:\\nA:"``,
    ``'no'``: how ``--help`` and ``asyncrl config`` write such defaults) is unquoted, escapes read."""
    quoted = raw.strip()
    if len(quoted) >= 2 and quoted[0] == quoted[-1] and quoted[0] in "'\"":
        try:
            value = yaml.safe_load(quoted)
        except yaml.YAMLError:
            return raw
        if isinstance(value, str):
            return value
    return raw


def _yaml_value(raw: str, key: str) -> Any:
    if not raw.strip():
        return ""
    try:
        return load_yaml_text(raw)
    except YamlRefused as err:
        raise ConfigError(key, f"{raw[:80]!r}: {err}") from None
    except yaml.YAMLError:
        raise ConfigError(key, f"cannot read {raw!r} as a YAML value") from None


def apply_override(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node = data
    for i, part in enumerate(parts[:-1]):
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ConfigError(".".join(parts[: i + 1]), "is a value, not a section")
        node = child
    node[parts[-1]] = value


# A config holds tens of values; aliases that expand past this many are an alias bomb ("billion
# laughs": nine aliases of nine aliases ... expand to 10^9 values and hang whatever walks them)
MAX_YAML_VALUES = 100_000


class YamlRefused(ValueError):
    """YAML that parses but is refused: a duplicate key, or aliases expanding past MAX_YAML_VALUES."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line  # 1-based, where known


class _StrictLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last
    silently, so a forgotten earlier ``lr:`` would win or lose unseen)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` overrides on purpose
                key = self.construct_object(key_node, deep=True)
                line = key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise YamlRefused(f"duplicate key {key!r} (first at line {seen[key]})", line)
                    seen[key] = line
                except TypeError:  # an unhashable key: SafeLoader refuses it next
                    continue
        return super().construct_mapping(node, deep)


def _expanded_size(root: yaml.Node) -> int:
    """How many values ``root`` holds with every alias expanded (iterative: no recursion limit,
    and each distinct node is sized once, so a bomb is measured without expanding it)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else node.value
        if children_done:
            sizes[id(node)] = 1 + sum(sizes.get(id(c), 0) for c in children)
            if sizes[id(node)] > MAX_YAML_VALUES:
                return sizes[id(node)]
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def load_yaml_text(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate keys, alias bombs and documents nested too deeply
    for the parser (:class:`YamlRefused`)."""
    loader = _StrictLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise YamlRefused("nested too deeply") from None
        if node is None:
            return None
        size = _expanded_size(node)
        if size > MAX_YAML_VALUES:
            raise YamlRefused(f"its aliases expand to more than {MAX_YAML_VALUES:,} values (an alias bomb?)",
                              node.start_mark.line + 1)
        try:
            return loader.construct_document(node)
        except RecursionError:
            raise YamlRefused("nested too deeply") from None
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError("--config", f"no such file: {path}")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError("--config", f"{path} is not a UTF-8 text file (byte {err.object[err.start]:#04x} "
                                      f"at offset {err.start})") from None
    except OSError as err:
        raise ConfigError("--config", f"cannot read {path}: {err.strerror or err}") from None
    try:
        data = load_yaml_text(text) or {}
    except YamlRefused as err:
        where = f"{path}:{err.line}" if err.line else str(path)
        raise ConfigError("--config", f"{where}: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError("--config", f"invalid YAML at {where}") from None
    if not isinstance(data, dict):
        raise ConfigError("--config", f"{path} must hold a mapping at top level")
    return data


def merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Deep merge ``extra`` into a copy of ``base``."""
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out
