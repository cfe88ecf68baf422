"""Reading dataset records from where users keep them, without ever downloading anything.

Sources: a JSONL file (or a ``.json`` file holding JSON lines or one JSON array), a Parquet or
Arrow file, a directory written by ``datasets``' ``save_to_disk``, or a Hub-style name
(``openai/gsm8k``) that ``datasets.load_dataset`` has already put in the local datasets cache.

JSONL is validated line by line here, so errors name the exact line. Every other source is read
through the ``datasets`` library; local files get a throwaway cache directory removed right after
loading (nothing lands in ``~/.cache``), and their errors name the row index. A Hub name is read
in offline mode from the user's datasets cache (``HF_DATASETS_CACHE``); when it is not there the
error says so and how to give a local file instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["get_field", "is_hub_name", "load_records", "MISSING"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
# file suffix -> the ``datasets`` packaged builder that reads it
_BUILDERS = {".parquet": "parquet", ".pq": "parquet", ".arrow": "arrow"}
# DatasetDict / Hub split tried for the train and eval sides when none is named (first present wins)
_DEFAULT_SPLITS = {"train": ("train",), "eval": ("test", "validation", "eval", "valid")}
_HUB_NAME = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")

MISSING = object()

# One JSON line (a row) may hold at most this many bytes: a line is read whole before it is parsed,
# and a file with no newline would otherwise be read whole into memory as "one row".
ROW_BYTES_BOUND = 16 << 20
# A JSON array file is one document, parsed whole (several times its size in memory); past this
# size it is refused with the advice to write it as JSON lines, which are read row by row.
ARRAY_FILE_BYTES_BOUND = 256 << 20


def is_hub_name(path: str | os.PathLike) -> bool:
    """``owner/name`` that is not a local path: looked up in the local datasets cache."""
    text = str(path)
    return (not Path(text).exists() and bool(_HUB_NAME.match(text))
            and Path(text).suffix.lower() not in (*_JSONL_SUFFIXES, *_BUILDERS))


def load_records(path: str | os.PathLike, role: str = "train", *, split: str | None = None,
                 subset: str | None = None) -> Iterator[tuple[str, dict]]:
    """Yield ``(location, record)`` for every record of ``path``.

    ``location`` is ``"file:LINE"`` for JSONL (1-based physical line), ``"file: item I"`` for a
    JSON array file and ``"file: row I"`` (0-based) otherwise, ready to prefix an error message.
    ``split`` names the split of a saved ``DatasetDict`` or a Hub dataset; None picks by ``role``
    ("train": ``train``; "eval": ``test``, ``validation``, ``eval`` or ``valid``). ``subset`` is a
    Hub dataset's configuration (``main`` for ``openai/gsm8k``); None = the only one cached.
    """
    shown = str(path)
    p = Path(path)
    if is_hub_name(path):
        yield from _rows(_load_hub(shown, role, split, subset), shown)
        return
    if not p.exists():
        raise ValueError(f"{shown}: no such file or directory")
    if p.is_dir():
        yield from _rows(_load_saved(p, shown, role, split), shown)
    elif p.suffix.lower() in _BUILDERS:
        yield from _rows(_load_file(p, _BUILDERS[p.suffix.lower()]), shown)
    elif p.suffix.lower() in _JSONL_SUFFIXES:
        yield from _read_json_lines(p, shown)
    else:
        raise ValueError(
            f"{shown}: unsupported file type {p.suffix!r} (expected .jsonl, .json, .parquet, .arrow, a directory "
            "written by datasets' save_to_disk, or a Hub name in the local datasets cache)"
        )


def _read_json_lines(p: Path, shown: str) -> Iterator[tuple[str, dict]]:
    with p.open("rb") as fh:
        head = fh.read(4096).lstrip()
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:].lstrip()
    if head.startswith(b"["):  # a JSON array file, not JSON lines
        size = p.stat().st_size
        if size > ARRAY_FILE_BYTES_BOUND:
            raise ValueError(f"{shown}: a JSON array file of {size:,} bytes, over the bound of "
                             f"{ARRAY_FILE_BYTES_BOUND >> 20} MiB for one JSON document; write it as JSON lines "
                             "(one object per line), which are read row by row")
        try:
            data = json.loads(p.read_text(encoding="utf-8-sig"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{shown}: invalid JSON: {exc}") from None
        except RecursionError:
            raise ValueError(f"{shown}: JSON nested too deeply to read") from None
        for i, record in enumerate(data):
            where = f"{shown}: item {i}"
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record
        return
    with p.open("rb") as fh:
        for lineno, raw in enumerate(iter(lambda: fh.readline(ROW_BYTES_BOUND + 1), b""), start=1):
            where = f"{shown}:{lineno}"
            if len(raw) > ROW_BYTES_BOUND and not raw.endswith(b"\n"):  # read no further: it may never end
                raise ValueError(f"{where}: a line of more than {ROW_BYTES_BOUND >> 20} MiB, over the bound on "
                                 "one row (asyncrl.tasks.records.ROW_BYTES_BOUND)")
            try:
                line = raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{where}: invalid UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: invalid JSON: {exc.msg} (column {exc.colno})") from None
            except RecursionError:  # the parser recurses once per level of [ or {
                raise ValueError(f"{where}: JSON nested too deeply to read") from None
            if not isinstance(record, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(record).__name__}")
            yield where, record


@contextlib.contextmanager
def _quiet_datasets(throwaway_cache: bool = True) -> Iterator[Any]:
    """Import ``datasets`` with progress bars off; a temporary cache directory unless asked not to."""
    import datasets

    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        if throwaway_cache:
            with tempfile.TemporaryDirectory(prefix="asyncrl-datasets-") as cache_dir:
                yield datasets, cache_dir
        else:
            yield datasets, None
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()


def _load_file(p: Path, builder: str) -> list[dict]:
    with _quiet_datasets() as (datasets, cache_dir):
        try:
            ds = datasets.load_dataset(builder, data_files=str(p), split="train", cache_dir=cache_dir,
                                       keep_in_memory=True)
        except Exception as exc:  # pyarrow / datasets errors on a corrupt file
            raise ValueError(f"{p}: cannot read {builder.capitalize()} file: {exc}") from None
        return ds.to_list()


def _pick_split(names: list[str], shown: str, role: str, split: str | None) -> str:
    if split is not None:
        if split not in names:
            raise ValueError(f"{shown}: no split {split!r} (splits: {', '.join(names)})")
        return split
    wanted = _DEFAULT_SPLITS.get(role, (role,))
    chosen = next((s for s in wanted if s in names), names[0] if len(names) == 1 else None)
    if chosen is None:
        raise ValueError(f"{shown}: DatasetDict has splits {names}; the {role} split must be one of {list(wanted)} "
                         f"(or name it with task.{'split' if role == 'train' else 'eval_split'})")
    return chosen


def _load_saved(p: Path, shown: str, role: str, split: str | None) -> list[dict]:
    with _quiet_datasets() as (datasets, _):
        try:
            ds = datasets.load_from_disk(str(p), keep_in_memory=True)
        except Exception as exc:
            raise ValueError(f"{shown}: not a dataset saved with save_to_disk: {exc}") from None
        if isinstance(ds, datasets.DatasetDict):
            ds = ds[_pick_split(list(ds), shown, role, split)]
        return ds.to_list()


@contextlib.contextmanager
def _offline(datasets) -> Iterator[None]:
    """No network for the duration, whatever the environment says (``HF_HUB_OFFLINE=1``)."""
    import huggingface_hub.constants as hub

    saved = datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = hub.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, hub.HF_HUB_OFFLINE = saved


def _load_hub(name: str, role: str, split: str | None, subset: str | None) -> list[dict]:
    """A Hub dataset from the local datasets cache (what an earlier ``load_dataset(name)`` left)."""
    with _quiet_datasets(throwaway_cache=False) as (datasets, _):
        cache = Path(os.path.expanduser(str(datasets.config.HF_DATASETS_CACHE)))
        owner, _, base = name.partition("/")
        root = cache / f"{owner}___{_snake(base)}"
        cached = sorted(d.name for d in root.iterdir() if d.is_dir()) if root.is_dir() else []
        hint = (f"download it once where there is network (datasets.load_dataset({name!r})), or set "
                "task.path to a local .jsonl / .parquet / .arrow file or save_to_disk directory")
        if not cached:
            raise ValueError(f"{name}: not a local file and not in the local datasets cache ({cache}); {hint}")
        if subset is None and len(cached) > 1:
            raise ValueError(f"{name}: several subsets cached ({', '.join(cached)}); pick one with task.subset")
        if subset is not None and subset not in cached:
            raise ValueError(f"{name}: subset {subset!r} is not in the local datasets cache (cached: "
                             f"{', '.join(cached)}); {hint}")
        try:
            with _offline(datasets):
                splits = datasets.load_dataset(name, subset or cached[0], cache_dir=str(cache), keep_in_memory=True)
        except Exception as exc:
            raise ValueError(f"{name}: cannot read it from the local datasets cache: "
                             f"{str(exc).splitlines()[0]}") from None
        return splits[_pick_split(list(splits), name, role, split)].to_list()


def _snake(name: str) -> str:
    """The directory name ``datasets`` caches a Hub dataset under (its camelCase → snake_case rule)."""
    from datasets.naming import camelcase_to_snakecase

    return camelcase_to_snakecase(name)


def _rows(rows: list[dict], shown: str) -> Iterator[tuple[str, dict]]:
    for i, row in enumerate(rows):
        yield f"{shown}: row {i}", row


def get_field(record: Any, field: str) -> Any:
    """``record[field]``, or a walk along a dotted path (integer parts index lists); :data:`MISSING`
    when absent."""
    if isinstance(record, dict) and field in record:
        return record[field]
    node = record
    for part in field.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.lstrip("-").isdigit() and -len(node) <= int(part) < len(node):
            node = node[int(part)]
        else:
            return MISSING
    return node
