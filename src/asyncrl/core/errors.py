"""The base of the errors asyncrl raises on purpose, and their passage between processes.

Every error a run raises on purpose derives from :class:`AsyncRLError` (docs/python-api.md holds
the family): ``except asyncrl.AsyncRLError`` catches each of them and nothing else. A rollout
worker process that hits one sends it to the trainer as data (:func:`as_payload`), and the trainer
raises it again as the same class with the same one-line message (:func:`from_payload`): a fault
raises the same class whether it struck in the trainer (``run.mode=sync``) or in a worker (``async``).
"""

from __future__ import annotations

from typing import Any

from asyncrl.core.import_path import resolve

__all__ = ["AsyncRLError", "as_payload", "from_payload"]


class AsyncRLError(Exception):
    """The base of every error asyncrl raises on purpose; ``str()`` is one line naming the cause."""


def as_payload(err: AsyncRLError) -> dict[str, Any]:
    """``err`` as plain data for a queue to another process: its class's import path, its message and
    its plain attributes (a ConfigError's ``key``)."""
    cls = type(err)
    plain = (str, int, float, bool, type(None))
    return {"cls": f"{cls.__module__}:{cls.__qualname__}", "message": str(err),
            "attrs": {k: v for k, v in vars(err).items() if isinstance(v, plain)}}


def from_payload(payload: dict[str, Any] | str, fallback: type[AsyncRLError]) -> AsyncRLError:
    """The error :func:`as_payload` described, of the same class with the same message (not built by
    its ``__init__``, whose arguments differ from class to class); ``fallback(message)`` when the class
    cannot be found here or is not an :class:`AsyncRLError` (or the payload is a bare message)."""
    if isinstance(payload, str):
        return fallback(payload)
    message = str(payload.get("message", ""))
    try:
        cls: Any = resolve(str(payload["cls"]))
    except (KeyError, ValueError):
        cls = None
    if not (isinstance(cls, type) and issubclass(cls, AsyncRLError)):
        return fallback(message)
    err = cls.__new__(cls)
    Exception.__init__(err, message)
    for name, value in dict(payload.get("attrs") or {}).items():
        setattr(err, name, value)
    return err
