"""gymnasium and MuJoCo are the optional ``control`` extra (``pip install 'asyncrl[control]'``).

Only building an env needs them, so :mod:`benchmarks.control` imports gymnasium inside the functions that
build or type-check envs, and the rest of the package (every other command, the configs, the arms,
the reports) imports and runs without it. A run that does need them is refused up front with one
line naming the pip command, instead of a traceback from deep inside env construction.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable

from benchmarks.control.config import MUJOCO_ENVS

INSTALL = "pip install 'asyncrl[control]'"
DISPLAY_NAMES = {"gymnasium": "gymnasium", "mujoco": "MuJoCo"}


class MissingControlExtra(ValueError):
    """gymnasium (or MuJoCo, for a MuJoCo env) is not installed; the message says what to install."""


def _importable(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def require_control_extra(env_ids: Iterable[str], subject: str) -> None:
    """Raise MissingControlExtra, one line ``"<subject> needs gymnasium and MuJoCo: pip install ..."``
    naming what is missing, unless gymnasium imports, and MuJoCo too when any of ``env_ids`` is a
    MuJoCo env (CartPole needs only gymnasium)."""
    needed = ["gymnasium"] + (["mujoco"] if any(env in MUJOCO_ENVS for env in env_ids) else [])
    missing = [DISPLAY_NAMES[module] for module in needed if not _importable(module)]
    if missing:
        raise MissingControlExtra(f"{subject} needs {' and '.join(missing)}: {INSTALL}")
