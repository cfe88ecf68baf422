"""Loading a tokenizer from a local Hugging Face directory, the one way every model asyncrl loads
(the policy, a reward model) gets its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["GENERIC_TOKENIZER_CLASSES", "load_tokenizer", "tokenizer_problem"]

GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG = "tokenizer_config.json"


def load_tokenizer(path: str | Path):
    """AutoTokenizer, except for a generic ``tokenizers`` tokenizer (ours): AutoTokenizer would pick
    the model type's tokenizer class (Qwen2Tokenizer) and silently replace its pre-tokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def tokenizer_problem(folder: Path) -> str | None:
    """What ``folder`` lacks for its tokenizer to load, in words; None when nothing is missing.

    ``tokenizer.json`` alone is enough. Without it, ``tokenizer_config.json`` must be there, with
    the vocabulary files of the tokenizer class it names (transformers' own list for that class:
    ``vocab.json`` + ``merges.txt`` for Qwen2, ``tokenizer.model`` for Llama, ...)."""
    if (folder / TOKENIZER_FILE).is_file():
        return None
    wanted = f"{TOKENIZER_FILE}, or {TOKENIZER_CONFIG} with its vocab files"
    config_file = folder / TOKENIZER_CONFIG
    if not config_file.is_file():
        return f"no tokenizer files (neither {TOKENIZER_FILE} nor {TOKENIZER_CONFIG}); a model folder needs {wanted}"
    try:
        declared = json.loads(config_file.read_text(encoding="utf-8")).get("tokenizer_class")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as err:
        return f"cannot read {TOKENIZER_CONFIG}: {str(err).splitlines()[0] if str(err) else type(err).__name__}"
    needed = _vocab_files(declared)
    missing = [name for name in needed if not (folder / name).is_file()]
    if missing:
        return (f"no tokenizer vocabulary: {TOKENIZER_CONFIG} names {declared}, which needs {TOKENIZER_FILE} "
                f"or {' + '.join(needed)} (missing: {', '.join(missing)})")
    return None


def _vocab_files(tokenizer_class: str | None) -> list[str]:
    """The files besides ``tokenizer.json`` that transformers reads for ``tokenizer_class``; none
    known for an unnamed or unknown class (its load then decides)."""
    if not isinstance(tokenizer_class, str):
        return []
    from transformers.models.auto.tokenization_auto import tokenizer_class_from_name

    cls = tokenizer_class_from_name(tokenizer_class)
    names = getattr(cls, "vocab_files_names", None) or {}
    return [name for key, name in names.items() if key != "tokenizer_file" and name != TOKENIZER_FILE]
