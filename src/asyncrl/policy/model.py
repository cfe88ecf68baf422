"""Model + tokenizer loading. The embedded tiny model is a real ``transformers`` Qwen2 model built
from a config, so it runs through exactly the code path of a Hugging Face checkpoint."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase
from transformers import Qwen2Config, Qwen2ForCausalLM

from asyncrl.config import ModelConfig
from asyncrl.core.hf_tokenizer import load_tokenizer
from asyncrl.core.user_code import first_line

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def check_device(device: str) -> torch.device:
    """``device`` as a torch device, or a one-line ConfigError when this machine does not have it
    (checked when a run starts, not at config load: a GPU config still loads on a CPU machine).
    Every command that computes on CUDA (train, eval, the warm start) starts here, so a CUDA device
    also turns TF32 matmuls on (:func:`enable_tf32`)."""
    from asyncrl.core.loader import ConfigError

    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("policy.device", f"{device!r} requested but torch {torch.__version__} sees no "
                                               "CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ConfigError("policy.device", f"{device!r}: only {torch.cuda.device_count()} CUDA device(s)")
        enable_tf32()
    return dev


def enable_tf32() -> None:
    """float32 matmuls on CUDA in TF32 (tensor cores, 10-bit mantissa products, float32 sums): several
    times faster for float32 weights, and what bf16 autocast does not cover (the float32 parts).
    The CUDA-only switch: CPU matmuls stay full float32, and torch's legacy getter
    (``get_float32_matmul_precision``, which torch.compile reads) stays consistent."""
    torch.backends.cuda.matmul.allow_tf32 = True


def set_deterministic(on: bool) -> None:
    """Deterministic kernels (``run.deterministic``), in every process that computes."""
    if on:
        import os

        # cuBLAS needs a fixed workspace for reproducible GEMMs; read when CUDA initialises
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True, warn_only=False)
        torch.backends.cudnn.benchmark = False


def dtype_name(dtype: torch.dtype) -> str:
    """The config name of a torch dtype (a key of DTYPES)."""
    return next(name for name, value in DTYPES.items() if value == dtype)


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
    # transformers builds an empty tokenizer when the vocabulary files are missing: every prompt
    # would encode to nothing and the first forward pass fail far from the cause
    if not tokenizer("a 1", add_special_tokens=False)["input_ids"]:
        raise ValueError("its tokenizer encodes text to no tokens (tokenizer.json or the vocab files of "
                         "tokenizer_config.json missing)")
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    model = AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=DTYPES[dtype], **extra)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable()
    return model.to(device), tokenizer


def load_policy_for(policy_cfg, path: str | Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """``load_policy`` with the settings of a PolicyConfig; a directory that does not load (no
    weights, corrupt weights, no tokenizer, unknown architecture) is one ConfigError line."""
    from asyncrl.core.loader import ConfigError

    try:
        return load_policy(path, policy_cfg.device, policy_cfg.dtype,
                           attn_implementation=policy_cfg.attn_implementation,
                           gradient_checkpointing=policy_cfg.gradient_checkpointing)
    except torch.OutOfMemoryError:
        raise  # not the directory's fault
    except Exception as err:  # transformers / safetensors / tokenizers raise many kinds
        field = "policy.model_path" if policy_cfg.model_path else "policy.cache_dir"
        raise ConfigError(field, f"cannot load a model from {path}: {first_line(err, 300)}") from None


def num_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@torch.no_grad()
def plain_copy(model: torch.nn.Module, device: torch.device | str, dtype: torch.dtype) -> PreTrainedModel:
    """A separate plain (no LoRA) model with ``model``'s current weights, on ``device`` in ``dtype``:
    what a generation engine holds when it cannot share the trainer's module."""
    from asyncrl.policy.lora import base_model_of, export_state_dict, is_peft_model

    if not is_peft_model(model):
        return copy.deepcopy(model).to(device=device, dtype=dtype)
    base = base_model_of(model)
    fresh = type(base)(base.config)
    fresh.load_state_dict(export_state_dict(model))
    return fresh.to(device=device, dtype=dtype)
