"""Where asyncrl keeps what it builds once and reuses across runs and working directories: the
warm start of the embedded model and the cached step-0 evaluations.

``policy.cache_dir`` when set; else ``$ASYNCRL_CACHE``; else ``$XDG_CACHE_HOME/asyncrl``; else
``~/.cache/asyncrl``. One cache per user, not per working directory: a warm start built in one
project directory is the one every other run with the same inputs starts from.

A cache that cannot be one is a ConfigError line naming the directory and the setting it came from
(``policy.cache_dir``, ``$ASYNCRL_CACHE``, ...): a path that is a file, or lies under one, when it is
resolved (:func:`cache_root`); a directory that cannot be written, only when something must be
written there (:func:`writable_cache_dir`): a read-only cache that already holds what a run needs
(a warm start copied to each node) serves it.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from asyncrl.core.loader import ConfigError

ENV_VAR = "ASYNCRL_CACHE"
KEY = "policy.cache_dir"
_FIX = f"set {ENV_VAR} or {KEY} to a writable directory"


def _resolved(configured: str | None) -> tuple[Path, str]:
    """(the cache directory, the setting that chose it, as a message names it)."""
    if configured:
        return Path(configured).expanduser(), KEY
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser(), f"${ENV_VAR}"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec: a relative XDG_CACHE_HOME is invalid and ignored
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "asyncrl", "$XDG_CACHE_HOME"
    return Path.home() / ".cache" / "asyncrl", f"the default, {KEY} and ${ENV_VAR} being unset"


def cache_root(configured: str | None = None) -> Path:
    """The cache directory (not created here); ``configured``: ``policy.cache_dir`` ("" = unset).
    ConfigError when it is a file or lies under one."""
    root, source = _resolved(configured)
    probe = root
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        where = "is a file" if probe == root else f"lies under {probe}, a file"
        raise ConfigError(KEY, f"the cache directory {root} ({source}) {where}, not a directory; {_FIX}")
    return root


def writable_cache_dir(path: Path) -> Path:
    """``path`` (the cache directory or a folder in it) created and checked writable, by a throwaway
    directory made in it (``os.access`` says yes to root even on a read-only mount); ConfigError
    naming it and the setting that chose the cache when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".asyncrl-probe-", dir=path))
    except OSError as err:
        raise ConfigError(KEY, f"cannot write the cache directory {path} ({_source_of(path)}): "
                               f"{err.strerror or err}; {_FIX}") from None
    return path


def _source_of(path: Path) -> str:
    """The setting that put the cache at ``path``: the environment's, unless ``policy.cache_dir``
    moved it elsewhere."""
    root, source = _resolved(None)
    return source if path == root or root in path.parents else KEY
