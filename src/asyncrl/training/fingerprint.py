"""What a checkpoint fits: its ``fingerprint.json``, compared with the run that resumes from it.

A resume loads a checkpoint folder whole (its own ``config.json``, weights and optimizer state),
so a checkpoint of another model (copied in, or a run directory reused by hand) would otherwise be
trained on silently as if it were this run's. Every checkpoint therefore records:

* ``model``: the architecture fields of the model's config (:data:`ARCHITECTURE`: layers, widths,
  heads, vocabulary, tied embeddings, ...), those that decide the weights' shapes;
* ``tokenizer``: a digest of the tokenizer's vocabulary (token → id) and its eos token;
* ``settings``: the run settings the weights and the optimizer state were made for: ``loss.name``
  and the LoRA settings that change which tensors train (``policy.lora_rank``,
  ``policy.lora_target_modules``). The optimizer is always AdamW (:mod:`asyncrl.training.trainer`),
  so its kind is not a setting to record.

The run side is computed from the run's configuration and its starting weights' folder
(``policy.model_path`` or the cached warm start): the folder the resumed run's rollout workers load
first, whose architecture and tokenizer the checkpoint must share. Only keys present on both sides
are compared, so a field that a later transformers adds to a config class never refuses a resume.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FINGERPRINT = "fingerprint.json"
FORMAT = 1
# config fields (transformers' standard names; attribute_map covers n_layer and the like)
ARCHITECTURE = ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings", "max_position_embeddings",
                "num_experts", "num_local_experts", "moe_intermediate_size")


def architecture(model_config) -> dict:
    """The :data:`ARCHITECTURE` fields a ``PretrainedConfig`` has (None values left out)."""
    found = {}
    for key in ARCHITECTURE:
        value = getattr(model_config, key, None)
        if isinstance(value, (bool, int, float, str)):
            found[key] = value
    return found


def tokenizer_digest(tokenizer) -> str:
    """A digest of the vocabulary and the eos token: equal for a tokenizer saved and loaded again
    (the pad token is left out: loading sets a missing one to eos)."""
    payload = json.dumps([sorted(tokenizer.get_vocab().items()), tokenizer.eos_token])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def run_settings(cfg) -> dict:
    """The settings of ``cfg`` a checkpoint was made for (see the module's docstring)."""
    targets = cfg.policy.lora_target_modules  # None: peft's default for the model type
    return {"loss.name": cfg.loss.name, "policy.lora_rank": cfg.policy.lora_rank,
            "policy.lora_target_modules": list(targets) if targets is not None and cfg.policy.lora_rank else None}


def fingerprint(cfg, model_config, tokenizer) -> dict:
    return {"format": FORMAT, "model": architecture(model_config), "tokenizer": tokenizer_digest(tokenizer),
            "settings": run_settings(cfg)}


def model_fingerprint(cfg, model, tokenizer) -> dict:
    """The fingerprint a checkpoint of ``model`` (a peft model: its base) records."""
    from asyncrl.policy.lora import base_model_of

    return fingerprint(cfg, base_model_of(model).config, tokenizer)


def folder_fingerprint(cfg, folder: Path) -> dict:
    """The fingerprint of a run of ``cfg`` starting from the model folder ``folder`` (config and
    tokenizer only: no weights are read)."""
    from transformers import AutoConfig

    from asyncrl.core.hf_tokenizer import load_tokenizer

    return fingerprint(cfg, AutoConfig.from_pretrained(str(folder), local_files_only=True), load_tokenizer(folder))


def read_fingerprint(checkpoint: Path) -> dict | None:
    """A checkpoint's recorded fingerprint; None for one written before checkpoints had it."""
    path = Path(checkpoint) / FINGERPRINT
    return json.loads(path.read_text()) if path.is_file() else None


def _shown(value) -> str:
    return "none" if value is None else json.dumps(value) if isinstance(value, list) else str(value)


def difference(saved: dict, now: dict) -> str | None:
    """The first difference between a checkpoint's fingerprint and the run's, in words
    (``num_hidden_layers=2, this run has 4``); None when it fits."""
    for section in ("model", "settings"):
        mine, theirs = saved.get(section, {}), now.get(section, {})
        for key in [k for k in theirs if k in mine]:
            if mine[key] != theirs[key]:
                return f"{key}={_shown(mine[key])}, this run has {_shown(theirs[key])}"
        if section == "model" and saved.get("tokenizer") not in (None, now.get("tokenizer")):
            return (f"another tokenizer (vocabulary digest {saved['tokenizer']}), this run's is "
                    f"{now.get('tokenizer')}")
    return None
