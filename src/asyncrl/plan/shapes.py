"""The shape of a Qwen2-style decoder that ``asyncrl plan`` models: the Qwen2.5 presets, or a Hugging
Face ``config.json`` (a file, a model folder, or a hub id in the local cache). Pure data, no torch."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ModelShape:
    """A Qwen2-style decoder (RMSNorm, GQA attention with q/k/v biases, SwiGLU MLP)."""

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    head_dim: int = 0  # 0: hidden // heads
    qkv_bias: bool = True
    model_type: str = "qwen2"  # config.json's: peft's default LoRA targets depend on it

    @property
    def dim(self) -> int:
        return self.head_dim or self.hidden // self.heads

    @property
    def layer_params(self) -> int:
        """One decoder layer: q, k, v, o projections (+ q/k/v biases), gate/up/down, two norms."""
        q, kv = self.heads * self.dim, self.kv_heads * self.dim
        attn = self.hidden * (q + 2 * kv) + q * self.hidden + (q + 2 * kv if self.qkv_bias else 0)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def root_params(self) -> int:
        """Outside the layers: embeddings, final norm, LM head (FSDP2's root module)."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    @property
    def params(self) -> int:
        return self.layers * self.layer_params + self.root_params


# Qwen2.5 shapes, from the models' config.json (7B and 32B have a 152,064-row vocabulary, untied)
PRESETS = {
    "0.5B": ModelShape("Qwen2.5-0.5B", 896, 24, 14, 2, 4864, 151936, tied=True),
    "1.5B": ModelShape("Qwen2.5-1.5B", 1536, 28, 12, 2, 8960, 151936, tied=True),
    "7B": ModelShape("Qwen2.5-7B", 3584, 28, 28, 4, 18944, 152064, tied=False),
    "32B": ModelShape("Qwen2.5-32B", 5120, 64, 40, 8, 27648, 152064, tied=False),
}


def model_shape(spec: str) -> ModelShape:
    """A preset (``1.5B``, ``qwen2.5-1.5b``, case-insensitive), a Hugging Face ``config.json`` /
    model folder, or a hub id (``Qwen/Qwen2.5-7B``) in the local hub cache. ValueError naming
    ``--model`` otherwise."""
    key = spec.strip().lower().removeprefix("qwen2.5-").removesuffix("-instruct")
    for name, shape in PRESETS.items():
        if key == name.lower():
            return shape
    path, hub_id = Path(spec), None
    if not path.exists() and "/" in spec:
        from asyncrl.config.model_source import cached_snapshot, is_hub_id

        if is_hub_id(spec):
            path, hub_id = Path(cached_snapshot(spec) or spec), spec
    if path.is_dir():
        path = path / "config.json"
    if not path.is_file():
        raise ValueError(f"--model: no preset or config.json {spec!r} (presets: {', '.join(PRESETS)}, or a "
                         "path to a Hugging Face config.json or model folder, or a hub id in the local "
                         "Hugging Face cache)")
    try:
        return shape_from_config(json.loads(path.read_text(encoding="utf-8")), hub_id or str(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--model: cannot read {path}: {err}") from None


def shape_from_config(cfg: dict, name: str) -> ModelShape:
    """The shape of a decoder-only Hugging Face config (``text_config`` inside a multimodal one)."""
    cfg = cfg.get("text_config", cfg)
    if any(key in cfg for key in ("num_experts", "num_local_experts", "n_routed_experts")):
        raise ValueError(f"--model: {name}: mixture-of-experts models are not modelled")
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                           "vocab_size") if not isinstance(cfg.get(k), int) or cfg[k] < 1]
    if missing:
        raise ValueError(f"--model: {name}: no positive integer {missing[0]}")
    heads = cfg["num_attention_heads"]
    return ModelShape(name=cfg.get("_name_or_path") or name, hidden=cfg["hidden_size"],
                      layers=cfg["num_hidden_layers"], heads=heads,
                      kv_heads=int(cfg.get("num_key_value_heads") or heads),
                      intermediate=cfg["intermediate_size"], vocab=cfg["vocab_size"],
                      tied=bool(cfg.get("tie_word_embeddings", False)), head_dim=int(cfg.get("head_dim") or 0),
                      qkv_bias=bool(cfg.get("attention_bias", cfg.get("model_type") == "qwen2")),
                      model_type=str(cfg.get("model_type") or ""))


def config_model(cfg) -> ModelShape:
    """The model a loaded Config trains: ``policy.model_path``'s config.json, else the embedded
    model's ``model.*`` shape (tied embeddings)."""
    if cfg.policy.model_path:
        return model_shape(cfg.policy.model_path)
    m = cfg.model
    return ModelShape("embedded model (model.*)", m.hidden_size, m.num_layers, m.num_heads, m.num_kv_heads,
                      m.intermediate_size, m.vocab_size, tied=True)
