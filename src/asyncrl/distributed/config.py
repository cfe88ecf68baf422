"""Settings of the sharded trainer (``trainer.fsdp``), used when ``torchrun`` starts several ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from asyncrl.core.loader import setting
from asyncrl.core.registries import device_type

ParamDtype = Literal["none", "bfloat16"]


@dataclass
class FsdpConfig:
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) on every decoder layer, then the root.

    reshard_after_forward: free each layer's gathered parameters after its forward pass (less memory,
        one more all-gather in the backward pass); false keeps them until the backward pass.
    param_dtype: the dtype layers compute in (``bfloat16``: FSDP casts the gathered parameters; the
        shards, gradients' reduction and the optimizer stay float32); ``none``: the policy's dtype;
        ``auto`` (:func:`gather_dtype`): bfloat16 on CUDA when ``trainer.autocast=bfloat16`` (the
        layers compute in bf16 there anyway, so gathering float32 only costs memory and bandwidth:
        at 7B the gathered root and two layers hold 2.9 instead of 5.8 GiB a rank), none otherwise
        (the CPU, float32 or float16 compute).
    cpu_offload: keep parameter shards, gradients and optimizer state in host memory.
    timeout_s: the longest a collective waits for a rank that does not join it, and how long a wait
        outside collectives (for rank 0's next command, for the others to load the model) goes on
        after the awaited rank's heartbeat stops (asyncrl.distributed.liveness).
    """

    reshard_after_forward: bool = setting(True, "free gathered layer parameters after their forward pass")
    param_dtype: Literal["auto", "none", "bfloat16"] = setting(
        "auto", "compute dtype of the gathered parameters (gradients reduced in float32); none = policy.dtype; "
                "auto = bfloat16 on CUDA under trainer.autocast=bfloat16, else none")
    cpu_offload: bool = setting(False, "parameter shards, gradients and optimizer state in host memory")
    timeout_s: float = setting(
        300.0, "seconds a trainer rank waits for another rank that stopped answering (a collective, or a "
               "stopped process's heartbeat) before the job ends")

    def validate(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s: must be > 0")


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
