"""Loading a tokenizer from a local Hugging Face directory, the one way every model asyncrl loads
(the policy, a reward model) gets its tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["GENERIC_TOKENIZER_CLASSES", "load_tokenizer"]

GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def load_tokenizer(path: str | Path):
    """AutoTokenizer, except for a generic ``tokenizers`` tokenizer (ours): AutoTokenizer would pick
    the model type's tokenizer class (Qwen2Tokenizer) and silently replace its pre-tokenizer."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_file = Path(path) / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
