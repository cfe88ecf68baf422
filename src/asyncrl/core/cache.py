"""Where asyncrl keeps what it builds once and reuses across runs and working directories: the
warm start of the embedded model and the cached step-0 evaluations.

``policy.cache_dir`` when set; else ``$ASYNCRL_CACHE``; else ``$XDG_CACHE_HOME/asyncrl``; else
``~/.cache/asyncrl``. One cache per user, not per working directory: a warm start built in one
project directory is the one every other run with the same inputs starts from.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "ASYNCRL_CACHE"


def cache_root(configured: str | None = None) -> Path:
    """The cache directory (not created here); ``configured``: ``policy.cache_dir`` ("" = unset)."""
    if configured:
        return Path(configured).expanduser()
    if os.environ.get(ENV_VAR):
        return Path(os.environ[ENV_VAR]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # the XDG spec: a relative XDG_CACHE_HOME is invalid and ignored
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "asyncrl"
