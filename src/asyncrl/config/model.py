"""The policy model, the embedded tiny model and its supervised warm start: ``policy.*``, ``model.*``,
``pretrain.*``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from asyncrl.core.loader import (
    setting,
)


def _validate_device(device: str) -> None:
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        raise ValueError(f"device: not a torch device: {device!r} (cpu, cuda, cuda:N)") from None
    if kind not in ("cpu", "cuda"):
        raise ValueError(f"device: {device!r} is not supported (cpu, cuda, cuda:N)")


@dataclass
class ModelConfig:
    """Shape of the embedded tiny Qwen2-architecture model (ignored when policy.model_path is set)."""

    vocab_size: int = setting(1024, "tokenizer vocabulary (256 byte symbols + specials + BPE merges)")
    hidden_size: int = setting(192, "width of the residual stream")
    num_layers: int = setting(4, "transformer blocks")
    num_heads: int = setting(4, "attention heads (must divide hidden_size)")
    num_kv_heads: int = setting(4, "key/value heads (grouped-query attention; must divide num_heads)")
    intermediate_size: int = setting(512, "MLP hidden width")
    max_positions: int = setting(256, "context length in tokens (prompt + completion)")
    # Whole-number tokens make copying an operand one lookup instead of several: the warm start
    # learns ~3x faster than with one token per digit
    split_digits: bool = setting(False, "one token per digit instead of BPE-merged numbers")

    def validate(self) -> None:
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "intermediate_size", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1")
        if self.vocab_size < 300:
            raise ValueError("vocab_size: must be >= 300 (256 byte symbols + specials + merges)")
        if self.hidden_size % self.num_heads:
            raise ValueError("num_heads: must divide hidden_size")
        if self.num_heads % self.num_kv_heads:
            raise ValueError("num_kv_heads: must divide num_heads")


@dataclass
class PolicyConfig:
    """Which weights to train and where they run."""

    model_path: str | None = setting(
        None, "a local HF model directory, or a hub id (Qwen/Qwen2.5-0.5B-Instruct) already in the local "
              "Hugging Face cache; null = the embedded tiny model")
    device: str = setting("cpu", "cpu, cuda or cuda:N: trainer, rollout workers and evaluation")
    dtype: Literal["float32", "bfloat16", "float16"] = setting("float32", "the trained (master) weights")
    # 0 shares the cores out so every mode has the whole machine (config/threads.py)
    torch_threads: int = setting(0, "torch threads of the trainer process; 0 = auto: sync takes every core, "
                                    "async leaves one per local rollout worker, torchrun ranks split them")
    # one cache per user, not per working directory: a warm start is built once (asyncrl.core.cache)
    cache_dir: str = setting(
        "", "the warm start's cache; empty = $ASYNCRL_CACHE, else $XDG_CACHE_HOME/asyncrl or ~/.cache/asyncrl")
    chat_template: bool = setting(True, "wrap prompts in the tokenizer's chat template when it has one")
    attn_implementation: str | None = setting(
        None, "transformers attention: sdpa, eager, flash_attention_2; null = its default")
    gradient_checkpointing: bool = setting(False, "recompute activations in backward (less memory)")
    # bf16 rounding of the logits is the largest part of the generator/trainer log-prob mismatch
    # (MiniMax-M1, ScaleRL): both sides then compute the head in float32 (docs/models.md)
    lm_head_fp32: bool = setting(
        False, "the output head's matmul in float32 in the trainer and the transformers engine")
    # LoRA through peft (pip install "asyncrl[lora]"): rollout workers and checkpoints get the
    # merged weights (docs/models.md)
    lora_rank: int = setting(0, "LoRA rank; only the adapters train; 0 = full fine-tuning")
    lora_alpha: float = setting(16.0, "LoRA scaling numerator (scale = alpha / rank)")
    lora_dropout: float = setting(0.0, "dropout on the LoRA adapter inputs")
    lora_target_modules: list[str] | None = setting(
        None, "module names that get adapters; null = peft's default for the architecture")

    def validate(self) -> None:
        if self.torch_threads < 0:
            raise ValueError("torch_threads: must be >= 0 (0 = auto)")
        _validate_device(self.device)
        if self.lora_rank < 0:
            raise ValueError("lora_rank: must be >= 0 (0 = no LoRA)")
        if self.lora_alpha <= 0:
            raise ValueError("lora_alpha: must be > 0")
        if not 0 <= self.lora_dropout < 1:
            raise ValueError("lora_dropout: must be in [0, 1)")
        if self.lora_target_modules is not None and (
                not self.lora_target_modules or not all(m.strip() for m in self.lora_target_modules)):
            raise ValueError("lora_target_modules: must be a non-empty list of module names, or null")
        if self.model_path is not None:
            from asyncrl.config.model_source import resolve_model_dir

            # a hub id becomes its cached snapshot folder here, once: every process gets a path
            self.model_path = resolve_model_dir(self.model_path)


@dataclass
class PretrainConfig:
    """Supervised warm start of the embedded model on generated worked solutions."""

    steps: int = setting(300, "supervised AdamW steps")
    batch_size: int = setting(64, "worked solutions per step")
    lr: float = setting(3e-3, "peak learning rate (linear warmup, then cosine decay to 10 %)")
    warmup_steps: int = setting(30, "steps of linear learning-rate warmup")
    weight_decay: float = setting(0.01, "AdamW weight decay")
    seed: int = setting(0, "seed of the warm start (init and data order)")
    # the warm start then uses both styles, and the GSM8K-style reward accepts only one (see README)
    alt_style_frac: float = setting(
        0.5, 'fraction of demonstrations ending "The answer is N." instead of "#### N"')
    # the staleness testbed's warm start: what RL must fix is then the answer itself, not its format
    shortcut_frac: float = setting(
        0.0, "fraction of multi-step demonstrations that stop after the first operation (a wrong answer)")
    # the warm start runs alone, before any worker exists: use both cores
    torch_threads: int = setting(2, "torch threads of the warm start")

    def validate(self) -> None:
        if self.steps < 0:
            raise ValueError("steps: must be >= 0")
        if self.torch_threads < 1:
            raise ValueError("torch_threads: must be >= 1")
        for name in ("alt_style_frac", "shortcut_frac"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1]")
        if self.batch_size < 1:
            raise ValueError("batch_size: must be >= 1")
        if not 0 < self.lr < 1:
            raise ValueError("lr: must be in (0, 1)")
        if self.weight_decay < 0:
            raise ValueError("weight_decay: must be >= 0")
        if self.warmup_steps < 0:
            raise ValueError("warmup_steps: must be >= 0")
