"""Checkpoints: HF model + tokenizer (loadable by transformers/vLLM) + trainer state (optimizer,
RNG, step, version). Written to a temporary directory and renamed, so a crash mid-save leaves the
previous checkpoint intact.

A LoRA (peft) policy is saved as the plain base architecture with the adapters merged in, so the
directory loads with ``AutoModelForCausalLM`` / vLLM without peft; the adapter alone is kept in
``lora_adapter/`` (a subdirectory: an ``adapter_config.json`` at the top level would make
transformers try to load the directory as an adapter)."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import numpy as np
import torch


def save_checkpoint(path: Path, model, tokenizer, trainer_state: dict, step: int) -> Path:
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    from asyncrl.policy.lora import base_model_of, export_state_dict, is_peft_model

    base_model_of(model).save_pretrained(tmp, state_dict=export_state_dict(model))
    if is_peft_model(model):
        model.save_pretrained(tmp / "lora_adapter")
    tokenizer.save_pretrained(tmp)
    torch.save({
        **trainer_state, "step": step,
        "torch_rng": torch.get_rng_state(), "python_rng": random.getstate(),
        "numpy_rng": np.random.get_state(),
    }, tmp / "trainer_state.pt")
    old = path.with_name(path.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path
