"""The one registry shape of asyncrl: :class:`Registry`, a dict of name → entry with a label.

Every extension point (run modes, backends, channels, engines, tasks, losses, proximal strategies,
trackers, environments, tools, tool formats, KL estimators, lr shapes, bench suites) is a
``Registry``. It is a plain dict to the code that fills it (``MODES["replay"] = ModeEntry(...)``,
``name in TASKS``), and adds what each registry used to write by hand:

* :meth:`Registry.lookup`, whose error for a name that is not there is one line naming the key
  (``kind``), the bad value, the close matches and the known names;
* prefix families (:meth:`Registry.family`): one resolver for every name ``<prefix><id>``
  (``gem:<id>``, any GEM game), which ``in``, ``[]``, ``get`` and ``lookup`` see;
* :meth:`Registry.register`, a decorator that adds a function or class under a name.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from asyncrl.core.import_path import resolve

__all__ = ["Registry", "close_hint", "refusal"]

V = TypeVar("V")
SHOWN_ID = "<id>"  # how help and errors show the variable part of a family's names


def close_hint(name: Any, candidates: Iterable[str]) -> str:
    """`` (did you mean 'a' or 'b'?)`` naming the candidates close to ``name``; empty when none is."""
    pool = [str(c) for c in candidates]
    close = difflib.get_close_matches(name, pool, n=3, cutoff=0.6) if isinstance(name, str) else []
    return f" (did you mean {' or '.join(map(repr, close))}?)" if close else ""


def refusal(name: Any, known: Iterable[str], candidates: Iterable[str] | None = None) -> str:
    """Why ``name`` is not accepted, one line: the accepted names, the value, and the close
    matches among ``candidates`` (default: ``known``) when there are any."""
    known = list(known)
    hint = close_hint(name, known if candidates is None else candidates)
    return f"must be one of {', '.join(map(str, known))}; got {name!r}{hint}"


class Registry(dict[str, V], Generic[V]):
    """name → entry, labelled with the key that names its entries (``kind``: ``"loss.name"``).

    ``families``: prefix → resolver, a callable (or the ``"module:attr"`` import path of one, so the
    registry does not import it) called with the part of a name after the prefix; it returns the
    entry of that name, or raises ValueError (one line: why that id cannot be)."""

    def __init__(self, kind: str, entries: Mapping[str, Any] | None = None, *,
                 families: Mapping[str, Callable[[str], Any] | str] | None = None) -> None:
        super().__init__(entries or {})
        self.kind = kind
        self.families: dict[str, Callable[[str], Any] | str] = dict(families or {})

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {dict.__repr__(self)})"

    def __reduce__(self):  # a copy keeps the label and the families
        return _rebuild, (type(self), self.kind, dict(self), self.families)

    def family(self, prefix: str, resolver: Callable[[str], Any] | str) -> None:
        """Register every name ``<prefix><id>``: ``resolver(id)`` gives its entry."""
        self.families[prefix] = resolver

    def register(self, name: str) -> Callable[[Any], Any]:
        """Decorator: ``@TOOLS.register("mine")`` adds the decorated object under ``name``."""
        def add(obj: Any) -> Any:
            self[name] = obj
            return obj
        return add

    def names(self) -> list[str]:
        """The names to show (help, errors): the held ones, then each family as ``<prefix><id>``."""
        return [*self, *(prefix + SHOWN_ID for prefix in self.families)]

    def _family(self, name: Any) -> str | None:
        if not isinstance(name, str):
            return None
        return next((prefix for prefix in self.families if name.startswith(prefix)), None)

    def __missing__(self, name: Any) -> Any:
        prefix = self._family(name)
        if prefix is None:
            raise KeyError(name)
        resolver = self.families[prefix]
        if isinstance(resolver, str):
            resolver = resolve(resolver)
        return resolver(name[len(prefix):])

    def __contains__(self, name: Any) -> bool:
        try:
            return dict.__contains__(self, name) or self._family(name) is not None
        except TypeError:  # an unhashable value (a list out of YAML) is no name
            return False

    def get(self, name: Any, default: Any = None) -> Any:
        return self[name] if name in self else default

    def why_not(self, name: Any, also: Iterable[str] = ()) -> str | None:
        """Why ``name`` names no entry (one line, without the kind), or None when it does; a name
        in ``also`` (the words the key accepts besides the entries: ``auto``, ``none``) is fine."""
        also = list(also)
        if isinstance(name, str) and name in also:
            return None
        if name not in self:
            return refusal(name, [*also, *self.names()], [*also, *self])
        if not dict.__contains__(self, name):
            try:
                self[name]
            except ValueError as err:  # the family refuses that id
                return str(err)
        return None

    def lookup(self, name: Any) -> V:
        """The entry of ``name``; ValueError ``"<kind>: <why not>"`` (one line) when there is none."""
        if name in self:
            try:
                return self[name]
            except ValueError as err:  # the family refuses that id
                raise ValueError(f"{self.kind}: {err}") from None
        raise ValueError(f"{self.kind}: {self.why_not(name)}")


def _rebuild(cls: type[Registry], kind: str, entries: dict, families: dict) -> Registry:
    return cls(kind, entries, families=families)
