"""A resumed run's ``.inputs/`` files, checked against the content hash in their names before use.

:func:`asyncrl.train` writes what a script passed in memory under ``<run.out_dir>/.inputs/``, each
named by a hash of its content: ``<stem>-<sha1[:16]><suffix>`` for a file (a dataset, a function or
class pickled by value), ``reward_model-<sha1[:16]>/`` for a saved reward model. A resume loads the
saved ``config.yaml``, which imports the reward functions and unpickles those ``.pkl`` files; a
file changed since it was written (a shared run folder someone else can write to) would then run
their code in this process. :func:`check_saved_inputs` hashes every ``.inputs/`` entry the saved
configuration names before the configuration is loaded, and refuses in one line, naming the key and
the file, one whose content does not match its name, or one whose name carries no hash.

What this does not stop: whoever can write the run folder can also write a new ``config.yaml``
naming a new, correctly named pickle of their own. Resume only runs you trust as you trust code.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from asyncrl.config import ConfigError
from asyncrl.core.loader import read_yaml

INPUTS_DIR = ".inputs"  # as asyncrl.api.INPUTS_DIR
# a path into .inputs/: the entry directly under it, then whatever follows (a file inside a reward
# model's folder, or ``:name`` after a pickle)
_INPUT_ENTRY = re.compile(r"^(?P<entry>(?:.*[/\\])?\.inputs[/\\](?P<name>[^/\\:]+))")
_HASHED_NAME = re.compile(r"^(?P<stem>[\w.]+?)-(?P<digest>[0-9a-f]{16})(?P<suffix>\.\w+)?$")
_CHUNK = 1 << 24


def check_saved_inputs(config_path: Path) -> None:
    """Refuse (ConfigError naming the key) a ``.inputs/`` entry that ``config_path`` names and
    whose content no longer matches the hash in its name."""
    for key, text in _strings(read_yaml(config_path), ""):
        match = _INPUT_ENTRY.match(text)
        if match is None:
            continue
        entry = Path(match["entry"])
        if not entry.exists():
            continue  # loading it says that it is missing, in its own words
        named = _HASHED_NAME.match(match["name"])
        if named is None:
            raise ConfigError(key, f"{entry} is in {INPUTS_DIR}/ without the content hash asyncrl names its "
                                   "files by; refusing to load it")
        found = _digest(entry)
        if found != named["digest"]:
            raise ConfigError(key, f"{entry} does not match the content hash in its name (its content hashes to "
                                   f"{found}): it changed after it was written; refusing to load it")


def _strings(value, key: str):
    """(dotted key, string) for every string in a YAML document, lists included."""
    if isinstance(value, str):
        yield key, value
    elif isinstance(value, dict):
        for name, item in value.items():
            yield from _strings(item, f"{key}.{name}" if key else str(name))
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item, key)


def _digest(entry: Path) -> str:
    """The content hash asyncrl names ``entry`` by: of the file's bytes (asyncrl.api), or of a reward
    model folder's files, each path relative to it then its bytes, in path order
    (asyncrl.rewards.reward_model.save_reward_model)."""
    digest = hashlib.sha1()
    if entry.is_dir():
        files = sorted(p for p in entry.rglob("*") if p.is_file())
    else:
        files = [entry]
    for file in files:
        if entry.is_dir():
            digest.update(file.relative_to(entry).as_posix().encode())
        with open(file, "rb") as fh:
            for chunk in iter(lambda: fh.read(_CHUNK), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]
