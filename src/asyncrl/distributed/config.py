"""Settings of the sharded trainer (``trainer.fsdp``), used when ``torchrun`` starts several ranks."""

from __future__ import annotations

from typing import Literal

from asyncrl.config.parts import FsdpConfig
from asyncrl.core.registries import device_type

__all__ = ["FsdpConfig", "ParamDtype", "check_ranks", "gather_dtype", "param_dtype_of"]

ParamDtype = Literal["none", "bfloat16"]


def gather_dtype(param_dtype: str, device: str, autocast: str) -> ParamDtype:
    """The dtype FSDP gathers parameters in: ``param_dtype`` unless it is ``auto``, which is
    bfloat16 where the layers already compute in bf16 (CUDA with ``trainer.autocast=bfloat16``) and
    none elsewhere, so CPU runs and float32/float16 compute keep float32 gathers."""
    if param_dtype != "auto":
        return param_dtype  # type: ignore[return-value]
    return "bfloat16" if device_type(device) == "cuda" and autocast == "bfloat16" else "none"


def param_dtype_of(cfg) -> ParamDtype:
    """``trainer.fsdp.param_dtype`` resolved for the whole Config ``cfg`` (what ``asyncrl plan`` models)."""
    return gather_dtype(cfg.trainer.fsdp.param_dtype, cfg.policy.device, cfg.trainer.autocast)


def check_ranks(cfg, ranks: int) -> None:
    """ValueError naming the setting that a run with ``ranks`` trainer ranks (> 1) cannot honour.
    ``cfg``: the whole Config (the loss-side rules are check_micro_batching's)."""
    if ranks <= 1:
        return
    rows = cfg.rollout.batch_size // cfg.trainer.n_minibatches
    if rows < ranks:
        raise ValueError(f"trainer.n_minibatches: each minibatch ({rows} rows) needs at least one row per "
                         f"trainer rank ({ranks})")
    if cfg.trainer.ess_warning.action == "rollback":
        raise ValueError("trainer.ess_warning.action: rollback reloads one process's weights; with several "
                         "trainer ranks use warn or stop")
    if cfg.policy.lora_rank:
        raise ValueError("policy.lora_rank: LoRA runs with one trainer process only")
