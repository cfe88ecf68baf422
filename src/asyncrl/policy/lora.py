"""LoRA through ``peft`` (optional extra ``asyncrl[lora]``), and the one function every weight
consumer uses to read a policy's weights: :func:`export_state_dict`.

Design: only the *trainer* holds a peft model. Everything downstream of it sees plain base-model
weights with the LoRA update merged in (``W + scaling · B @ A``), under the base model's own
parameter names:

* rollout workers load the plain base checkpoint (no peft needed there) and receive merged
  weights through the usual channel (shared memory / Ray object store / vLLM reload). The
  shared-memory layout is therefore the base model's, fixed for the whole run, and identical with
  or without LoRA;
* checkpoints are written as a plain HF model (loadable by ``transformers`` and vLLM), plus the
  adapter itself in ``lora_adapter/`` for inspection or reuse.

The merge is computed out of place (``get_delta_weight`` of each LoRA layer added to a copy of
the base weight): the trained model is never mutated, so no merge/unmerge round trip can drift the
base weights in low precision.
"""

from __future__ import annotations

import torch

from asyncrl.core.loader import ConfigError

INSTALL_HINT = 'pip install "asyncrl[lora]" torch==<your torch version>'


def _peft():
    try:
        import peft
    except ImportError as err:
        raise ConfigError("policy.lora_rank", f"LoRA needs peft, which is not installed ({err}); "
                                              f"{INSTALL_HINT}") from None
    return peft


def is_peft_model(model: torch.nn.Module) -> bool:
    """True for a peft-wrapped model (checked without importing peft when it is not loaded)."""
    import sys

    peft = sys.modules.get("peft")
    return peft is not None and isinstance(model, peft.PeftModel)


def apply_lora(model: torch.nn.Module, policy_cfg) -> torch.nn.Module:
    """Wrap ``model`` with fresh LoRA adapters per ``policy_cfg`` (``lora_rank`` > 0), freezing
    the base weights; returns ``model`` unchanged when LoRA is off."""
    if policy_cfg.lora_rank <= 0:
        return model
    peft = _peft()
    config = peft.LoraConfig(
        r=policy_cfg.lora_rank, lora_alpha=policy_cfg.lora_alpha, lora_dropout=policy_cfg.lora_dropout,
        target_modules=list(policy_cfg.lora_target_modules) if policy_cfg.lora_target_modules else None,
        bias="none", task_type="CAUSAL_LM")
    checkpointing = getattr(model, "is_activation_checkpointing", None)  # transformers >= 5.x name
    if checkpointing is None:
        checkpointing = getattr(model, "is_gradient_checkpointing", False)
    if checkpointing:
        # the frozen embeddings output no grad: checkpointed blocks would then see no grad input
        model.enable_input_require_grads()
    try:
        return peft.get_peft_model(model, config)
    except ValueError as err:  # unknown architecture without target modules, or a module not found
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise ConfigError("policy.lora_target_modules", message) from None


# peft.LoraConfig field → the policy key it sets (what apply_lora builds its LoraConfig from)
LORA_KEYS = {"r": "policy.lora_rank", "lora_alpha": "policy.lora_alpha", "lora_dropout": "policy.lora_dropout",
             "target_modules": "policy.lora_target_modules"}
# what says nothing about the adapters trained: peft's own bookkeeping, set when a model is wrapped
LORA_METADATA = ("peft_type", "peft_version", "auto_mapping", "base_model_name_or_path", "revision")


def lora_settings(peft_config) -> dict[str, object]:
    """The ``policy.lora_*`` settings of TRL's ``peft_config`` (a ``peft.LoraConfig``): rank, alpha,
    dropout and target modules. Anything else apply_lora would not honour (another PeftConfig, a
    field away from its default: DoRA, rsLoRA, ``modules_to_save``, a regex or ``"all-linear"`` for
    the target modules, a task other than causal LM, ...) is refused: ConfigError ``peft_config``."""
    import dataclasses

    peft = _peft()
    if not isinstance(peft_config, peft.LoraConfig) or peft_config.peft_type != peft.PeftType.LORA:
        raise ConfigError("peft_config", f"{type(peft_config).__name__} is not supported: only LoRA "
                                         "(a peft.LoraConfig), applied to the trainer's model")
    defaults = peft.LoraConfig()
    for field in dataclasses.fields(peft_config):
        name, value = field.name, getattr(peft_config, field.name)
        if name in LORA_KEYS or name in LORA_METADATA:
            continue
        if name == "task_type" and value not in (None, peft.TaskType.CAUSAL_LM):
            raise ConfigError("peft_config", f"task_type={value!r}: asyncrl trains causal language models "
                                             "(task_type='CAUSAL_LM' or None)")
        if name == "task_type":
            continue
        if value != getattr(defaults, name, value):
            raise ConfigError("peft_config", f"{name}={value!r} is not supported (asyncrl trains plain LoRA "
                                             f"adapters from r, lora_alpha, lora_dropout and target_modules); "
                                             f"leave {name} at its default")
    targets = peft_config.target_modules
    if isinstance(targets, str):
        raise ConfigError("peft_config", f"target_modules={targets!r}: a string (a regex, or 'all-linear') is not "
                                         "supported; list the module names, e.g. ['q_proj', 'v_proj']")
    if peft_config.r <= 0:
        raise ConfigError("peft_config", f"r={peft_config.r!r}: the LoRA rank must be > 0")
    values = {"r": peft_config.r, "lora_alpha": float(peft_config.lora_alpha),
              "lora_dropout": float(peft_config.lora_dropout), "target_modules": sorted(targets) if targets else None}
    return {LORA_KEYS[name]: value for name, value in values.items()}


def _lora_layers(model: torch.nn.Module):
    from peft.tuners.lora import LoraLayer

    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoraLayer)]


def _plain_name(key: str) -> str | None:
    """peft state-dict key of the inner model → the base model's key; None for adapter tensors."""
    parts = key.split(".")
    if any(p.startswith("lora_") for p in parts):
        return None
    return ".".join(p for p in parts if p != "base_layer")


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The base model's state dict with every active LoRA adapter merged in, out of place.

    Keys and shapes are exactly those of the plain base model (``AutoModelForCausalLM`` on the
    same checkpoint). Tensors not touched by LoRA are the model's own (not copies): copy them if
    they must outlive later optimizer steps. Tied weights keep sharing one tensor.
    """
    inner = model.get_base_model()
    state: dict[str, torch.Tensor] = {}
    for key, value in inner.state_dict().items():
        name = _plain_name(key)
        if name is not None:
            state[name] = value
    for name, layer in _lora_layers(inner):
        if layer.merged or layer.disable_adapters:
            continue  # merged: base weight already holds the update; disabled: it does not apply
        adapters = [a for a in layer.active_adapters if a in layer.lora_A]
        if not adapters:
            continue
        base = layer.get_base_layer()
        if getattr(layer, "lora_variant", None) and any(a in layer.lora_variant for a in adapters):
            raise NotImplementedError("merged_state_dict: only plain LoRA adapters (no DoRA/variants)")
        weight = base.weight.detach().clone()
        for adapter in adapters:
            weight += layer.get_delta_weight(adapter).to(weight.dtype)
        ptr = base.weight.data_ptr()
        for key, value in list(state.items()):  # every key that holds this tensor (tied weights too)
            if key == f"{name}.weight" or (value.data_ptr() == ptr and value.shape == weight.shape):
                state[key] = weight
    return state


def export_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What to publish/save for ``model``: its plain state dict, or the merged one for a peft model."""
    return merged_state_dict(model) if is_peft_model(model) else model.state_dict()


def base_model_of(model: torch.nn.Module) -> torch.nn.Module:
    """The ``PreTrainedModel`` inside a peft model (with LoRA layers injected), else ``model``."""
    return model.get_base_model() if is_peft_model(model) else model
