"""The configuration described to users: every dotted key with its type, default and one-line
description (each dataclass field's ``help``), for ``asyncrl <command> --help``, ``--help-keys``
and ``asyncrl config``. The dataclasses are the only source; nothing here lists keys by hand."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, get_args, get_origin, get_type_hints

import yaml

from asyncrl.config import Config
from asyncrl.core.loader import field_help, field_names, public_name


@dataclass(frozen=True)
class ConfigKey:
    key: str  # dotted, as written in overrides: trainer.lr
    section: str  # dotted path of the dataclass that holds it: trainer, task.arithmetic
    type: str
    default: Any
    help: str


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def type_label(tp: Any) -> str:
    """``Literal["a", "b"]`` → ``a|b``; ``int | None`` → ``int|null``; ``list[str]`` → ``list[str]``."""
    origin = get_origin(tp)
    if origin is Literal:
        return "|".join(str(a) for a in get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return "|".join("null" if a is type(None) else type_label(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"list[{', '.join(type_label(a) for a in get_args(tp))}]"
    if origin is dict:
        return "mapping"
    if tp is Any:
        return "any"
    return getattr(tp, "__name__", str(tp))


def value_label(value: Any) -> str:
    """A default as it would be written in YAML or an override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        plain = value and not any(c in value for c in "\n:#{}[],'\"") and yaml.safe_load(value) == value
        return value if plain else json.dumps(value)  # "no" would read back as false
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    return repr(value)


def config_keys(cls: type = Config, prefix: str = "") -> list[ConfigKey]:
    """Every leaf key of ``cls`` (nested dataclasses recursed into), in field order."""
    hints = get_type_hints(cls)
    keys: list[ConfigKey] = []
    nested: list[ConfigKey] = []  # after the section's own keys, so each section prints as one block
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        name = f"{prefix}.{public_name(f.name)}" if prefix else public_name(f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            nested.extend(config_keys(hints[f.name], name))
        else:
            names = field_names(f)  # a registry's names, plugins' included: listed like a Literal
            label = type_label(hints[f.name]) if names is None else "|".join(names)
            keys.append(ConfigKey(name, prefix, label, _default(f), field_help(f)))
    return keys + nested


def _first_sentence(doc: str) -> str:
    text = " ".join(doc.replace("``", "").split())
    head, dot, _ = text.partition(". ")
    sentence = head + "." if dot else text
    return sentence if len(sentence) <= 100 else sentence[:99].rstrip() + "…"


def section_titles(cls: type = Config, prefix: str = "") -> dict[str, str]:
    """Dotted section → first line of its dataclass's docstring."""
    titles: dict[str, str] = {}
    hints = get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            name = f"{prefix}.{public_name(f.name)}" if prefix else public_name(f.name)
            titles[name] = _first_sentence(tp.__doc__ or "")
            titles.update(section_titles(tp, name))
    return titles


def matching(keys: list[ConfigKey], pattern: str | None) -> list[ConfigKey]:
    """Keys whose name matches ``pattern`` (a glob when it has * ? [, else a case-insensitive
    substring of the key or its description)."""
    if not pattern:
        return keys
    if any(c in pattern for c in "*?["):
        return [k for k in keys if fnmatch.fnmatchcase(k.key, pattern)]
    needle = pattern.lower()
    return [k for k in keys if needle in k.key.lower() or needle in k.help.lower()]


def _names(cell: str) -> list[str]:
    """The names in backticks of a docs table cell, values dropped: "`loss_type="cispo"`" → loss_type."""
    return [name.split("=")[0] for name in re.findall(r"`([^`]+)`", cell) if not name.startswith('"')]


def peer_matches(pattern: str) -> list[tuple[str, str, str]]:
    """(library, their names, ours) rows of the other-library tables (asyncrl.config.peers: the
    config tables, TRL's agent arguments, then TRL's settings not offered, whose "ours" says why)
    with a name of theirs that matches ``pattern`` (a glob, else a case-insensitive substring)."""
    from asyncrl.config.peers import AGENT_PEER_NAMES, PEER_NAMES, TRL_NOT_OFFERED

    def hit(name: str) -> bool:
        if any(c in pattern for c in "*?["):
            return fnmatch.fnmatchcase(name, pattern)
        return pattern.lower() in name.lower()

    tables = (PEER_NAMES, AGENT_PEER_NAMES, {"TRL": TRL_NOT_OFFERED})
    return [(library, theirs, ours) for table in tables for library, rows in table.items()
            for theirs, ours in rows if any(hit(name) for name in _names(theirs))]


def describe_keys(pattern: str) -> str | None:
    """``--help-keys PATTERN``: the matching keys, and first the rows of TRL / verl / AReaL whose
    names match, each with our key(s), which are then listed too; None when nothing matches."""
    keys = config_keys()
    own = matching(keys, pattern)
    peers = peer_matches(pattern) if pattern else []
    named = {name for _, _, ours in peers for name in _names(ours)}
    shown = [k for k in keys if k in own or k.key in named]
    if not shown and not peers:
        return None
    lines = [f"{library} {theirs.replace('`', '')}  ->  {ours.replace('`', '')}" for library, theirs, ours in peers]
    return "\n".join([*(["in other libraries:", *(f"  {line}" for line in lines), ""] if lines else []),
                      format_keys(shown)]).rstrip()


def format_keys(keys: list[ConfigKey]) -> str:
    """Keys grouped by section: ``  trainer.lr   float = 3e-05   AdamW learning rate``."""
    titles = section_titles()
    width = max((len(k.key) for k in keys), default=0) + 2
    lines: list[str] = []
    section = None
    for k in keys:
        if k.section != section:
            section = k.section
            lines.append(f"{section}: {titles.get(section, '')}".rstrip())
        typed = f"{k.type} = {value_label(k.default)}"
        lines.append(f"  {k.key:<{width}}{typed:<28} {k.help}".rstrip())
    return "\n".join(lines)


def keys_epilog() -> str:
    """The config part of ``asyncrl train --help``."""
    from asyncrl.config.presets import preset_names

    return ("config keys: set as dotted.key=value after the command or in the --config YAML;\n"
            "--help-keys PATTERN filters them; `asyncrl config` prints the resolved values.\n\n"
            f"{format_keys(config_keys())}\n\npresets (--config NAME): {', '.join(preset_names())}")


def config_yaml(cfg: Config) -> str:
    """The fully resolved config as YAML; loading it back gives an equal config."""
    return yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=False, allow_unicode=True)
