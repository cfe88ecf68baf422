"""Model + tokenizer loading. The embedded tiny model is a real ``transformers`` Qwen2 model built
from a config, so it runs through exactly the code path of a Hugging Face checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase, \
    PreTrainedTokenizerFast
from transformers import Qwen2Config, Qwen2ForCausalLM

from asyncrl.config import ModelConfig

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def build_tiny_model(cfg: ModelConfig, tokenizer: PreTrainedTokenizerBase, seed: int = 0) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2-architecture causal LM sized by ``cfg``."""
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads,
        num_key_value_heads=cfg.num_kv_heads,
        max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    return model


def load_policy(path: str | Path, device: str = "cpu", dtype: str = "float32", *,
                attn_implementation: str | None = None, gradient_checkpointing: bool = False
                ) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load any local Hugging Face causal-LM directory (no hub access)."""
    tokenizer = load_tokenizer(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=DTYPES[dtype], **extra)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(device), tokenizer


def load_policy_for(policy_cfg, path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``load_policy`` with the settings of a PolicyConfig."""
    return load_policy(path, policy_cfg.device, policy_cfg.dtype,
                       attn_implementation=policy_cfg.attn_implementation,
                       gradient_checkpointing=policy_cfg.gradient_checkpointing)


GENERIC_TOKENIZER_CLASSES = {"TokenizersBackend", "PreTrainedTokenizerFast"}


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """AutoTokenizer, except for a generic ``tokenizers`` tokenizer (ours): AutoTokenizer would pick
    the model type's tokenizer class (Qwen2Tokenizer) and silently replace its pre-tokenizer."""
    config_file = Path(path) / "tokenizer_config.json"
    declared = json.loads(config_file.read_text()).get("tokenizer_class") if config_file.is_file() else None
    if declared in GENERIC_TOKENIZER_CLASSES:
        return PreTrainedTokenizerFast.from_pretrained(str(path), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
