"""Settings of the sharded trainer (``trainer.fsdp``), used when ``torchrun`` starts several ranks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from asyncrl.core.loader import setting


@dataclass
class FsdpConfig:
    """FSDP2 (``torch.distributed.fsdp.fully_shard``) on every decoder layer, then the root.

    reshard_after_forward: free each layer's gathered parameters after its forward pass (less memory,
        one more all-gather in the backward pass); false keeps them until the backward pass.
    param_dtype: the dtype layers compute in (``bfloat16``: FSDP casts the gathered parameters; the
        shards, gradients' reduction and the optimizer stay float32); ``none``: the policy's dtype.
    cpu_offload: keep parameter shards, gradients and optimizer state in host memory.
    timeout_s: the longest a collective waits for a rank that does not join it, and how long a wait
        outside collectives (for rank 0's next command, for the others to load the model) goes on
        after the awaited rank's heartbeat stops (asyncrl.distributed.liveness).
    """

    reshard_after_forward: bool = setting(True, "free gathered layer parameters after their forward pass")
    param_dtype: Literal["none", "bfloat16"] = setting(
        "none", "compute dtype of the gathered parameters (gradients reduced in float32); none = policy.dtype")
    cpu_offload: bool = setting(False, "parameter shards, gradients and optimizer state in host memory")
    timeout_s: float = setting(
        300.0, "seconds a trainer rank waits for another rank that stopped answering (a collective, or a "
               "stopped process's heartbeat) before the job ends")

    def validate(self) -> None:
        if not self.timeout_s > 0:
            raise ValueError("timeout_s: must be > 0")


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
