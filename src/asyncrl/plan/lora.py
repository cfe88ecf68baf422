"""LoRA on paper (``asyncrl plan policy.lora_rank=...``): the adapters peft adds to a decoder,
counted from the shapes, and what they save by autograd.

peft's LoRA layer on a linear ``in → out`` adds ``lora_A`` [r, in] and ``lora_B`` [out, r] (no
bias): r·(in + out) parameters, the only ones that train. They are kept in float32 whatever the
base weights' dtype (peft's ``autocast_adapter_dtype``). The base weights stay frozen in
``policy.dtype``: no gradients, no AdamW state. Only a decoder layer's seven linear layers are
modelled as targets; ``policy.lora_target_modules: null`` is peft's default for the model type.
"""

from __future__ import annotations

from dataclasses import dataclass

ADAPTER_BYTES = 4  # float32 adapters (peft's autocast_adapter_dtype), with bf16/fp16 base weights too
LAYER_LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# the tensor each linear layer reads: q/k/v share the first norm's output, gate/up the second's
INPUT_OF = {"q_proj": "attention input", "k_proj": "attention input", "v_proj": "attention input",
            "o_proj": "attention output", "gate_proj": "MLP input", "up_proj": "MLP input",
            "down_proj": "SwiGLU product"}


@dataclass(frozen=True)
class LoraPlan:
    """Adapters of rank ``rank`` on the linear layers ``modules`` of every decoder layer."""

    rank: int
    modules: tuple[str, ...]
    dropout: bool = False  # policy.lora_dropout > 0: a dropout mask and output per adapter input


def linear_shapes(shape) -> dict[str, tuple[int, int]]:
    """(in, out) features of a Qwen2/Llama-style decoder layer's linear layers."""
    q, kv, h, inter = shape.heads * shape.dim, shape.kv_heads * shape.dim, shape.hidden, shape.intermediate
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, inter), "up_proj": (h, inter), "down_proj": (inter, h)}


def _targets(shape, lora: LoraPlan) -> list[tuple[int, int]]:
    linears = linear_shapes(shape)
    return [linears[name] for name in lora.modules]


def adapter_params(shape, lora: LoraPlan) -> int:
    """Trainable parameters: r·(in + out) per adapted linear layer, in every layer."""
    return shape.layers * sum(lora.rank * (n_in + n_out) for n_in, n_out in _targets(shape, lora))


def adapted_params(shape, lora: LoraPlan) -> int:
    """Base weights that get an adapter: what publishing copies to merge ``W + scale·B A`` into."""
    return shape.layers * sum(n_in * n_out for n_in, n_out in _targets(shape, lora))


def largest_adapter(shape, lora: LoraPlan) -> int:
    """Elements of the largest adapter matrix (AdamW's temporaries on the CPU are two of it)."""
    return max(lora.rank * max(n_in, n_out) for n_in, n_out in _targets(shape, lora))


def layer_bytes_per_token(shape, lora: LoraPlan, r: int, a: int, autocast: bool, mask_bytes: int) -> int:
    """Bytes one decoder layer saves for the backward pass, per token position, when its base
    weights are frozen and ``lora`` adapts some of its linear layers (r, a: as in
    :func:`asyncrl.plan.estimate.layer_bytes_per_token`; ``mask_bytes``: a dropout mask element).

    Frozen base, 8h + 4a·qh + 3a·I: a frozen linear layer keeps no input (its weight has no
    gradient), so of the full fine-tuning terms only each RMSNorm's float32 input, q, k, v and the
    attention output, and SwiGLU's gate, silu(gate) and up remain.

    Adapters, per adapted linear ``in → out``: lora_B keeps lora_A's rank-r output (2 bytes under
    autocast, else 4), and lora_A keeps its input: a bf16 copy under autocast; a float32 copy
    with 2-byte weights (peft casts the input to the adapters' dtype) or with dropout (its
    output, plus the mask); else the layer's input tensor itself, once for the adapters that read
    the same input (q/k/v, gate/up)."""
    h, qh, inter = shape.hidden, shape.heads * shape.dim, shape.intermediate
    frozen = 8 * h + 4 * a * qh + 3 * a * inter
    middle = 2 if autocast else ADAPTER_BYTES
    copy = 2 if autocast else (ADAPTER_BYTES if r != ADAPTER_BYTES or lora.dropout else 0)
    linears, shared = linear_shapes(shape), set()
    adapters = 0
    for name in lora.modules:
        n_in = linears[name][0]
        adapters += lora.rank * middle + (n_in * mask_bytes if lora.dropout else 0)
        if copy:
            adapters += n_in * copy
        elif INPUT_OF[name] not in shared:  # the tensor itself, kept once
            shared.add(INPUT_OF[name])
            adapters += n_in * r
    return frozen + adapters


def lora_plan(policy_cfg, model_type: str) -> LoraPlan | None:
    """The :class:`LoraPlan` of a PolicyConfig (None without LoRA); ValueError naming the key for
    a target the planner does not model."""
    if not policy_cfg.lora_rank:
        return None
    targets = policy_cfg.lora_target_modules or _peft_default_targets(model_type)
    unknown = [name for name in targets if name not in LAYER_LINEARS]
    if unknown:
        raise ValueError(f"policy.lora_target_modules: asyncrl plan models adapters on a decoder layer's "
                         f"{', '.join(LAYER_LINEARS)}; not {', '.join(unknown)}")
    return LoraPlan(rank=policy_cfg.lora_rank, modules=tuple(dict.fromkeys(targets)),
                    dropout=policy_cfg.lora_dropout > 0)


def _peft_default_targets(model_type: str) -> list[str]:
    """peft's default target modules for ``model_type`` (what ``lora_target_modules: null`` gets)."""
    try:
        from peft.utils import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as defaults
    except ImportError:
        raise ValueError("policy.lora_target_modules: null means peft's default for the architecture, and "
                         "peft is not installed; name the modules (e.g. [q_proj, v_proj])") from None
    if model_type not in defaults:
        raise ValueError(f"policy.lora_target_modules: peft has no default target modules for model type "
                         f"{model_type!r}; name them (e.g. [q_proj, v_proj])")
    return list(defaults[model_type])
