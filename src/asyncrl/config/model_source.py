"""Where ``policy.model_path`` points, settled once at config load.

A local model folder, or a Hugging Face hub id (``Qwen/Qwen2.5-0.5B-Instruct``) that an earlier
download left in the local hub cache (``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
``~/.cache/huggingface/hub``): it is resolved offline to its snapshot folder, so every process
and engine (vLLM included) is handed a directory, and nothing is ever downloaded at run time.
The folder is then checked for what loading needs (``config.json`` and tokenizer files): a
missing tokenizer would otherwise load as an empty one and fail deep inside the first forward pass.
"""

from __future__ import annotations

from pathlib import Path

from asyncrl.core.hf_tokenizer import tokenizer_problem



def resolve_model_dir(text: str) -> str:
    """``text`` as a checked model folder: itself when it is a directory, else the cached snapshot
    of the hub id ``text``. ValueError ``model_path: ...`` (one line) otherwise."""
    if Path(text).is_dir():
        folder = text
    elif is_hub_id(text):
        folder = cached_snapshot(text)
        if folder is None:
            raise ValueError(
                f"model_path: {text} is not a local directory and not in the local Hugging Face cache at "
                f"{hub_cache_dir()}; nothing is downloaded at run time: fetch it beforehand with "
                f"`hf download {text}` (`huggingface-cli download {text}` before huggingface_hub 1.0), "
                "or point HF_HUB_CACHE / HF_HOME at the cache that holds it")
    else:
        raise ValueError(f"model_path: no such directory: {text}")
    if not (Path(folder) / "config.json").is_file():
        raise ValueError(f"model_path: not a Hugging Face model directory (no config.json): {folder}")
    problem = tokenizer_problem(Path(folder))
    if problem is not None:
        raise ValueError(f"model_path: {folder}: {problem}")
    return folder


def is_hub_id(text: str) -> bool:
    """``name`` or ``owner/name`` as the hub spells repository ids (a path with ``./``, ``~`` or
    several ``/`` is not one)."""
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(text)
    except ValueError:  # HFValidationError
        return False
    return True


def hub_cache_dir() -> str:
    """The hub cache huggingface_hub reads (HF_HUB_CACHE, else $HF_HOME/hub, else its default)."""
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def cached_snapshot(repo_id: str) -> str | None:
    """The snapshot folder the local hub cache holds for ``repo_id`` (its ``refs/main``), offline;
    None when the cache has none."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except LocalEntryNotFoundError:
        return None
