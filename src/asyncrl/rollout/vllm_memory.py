"""vLLM's memory share on a CUDA device, from what is already on it and what generation needs.

vLLM's ``gpu_memory_utilization`` is a fraction of the device's *total* memory that must be free when
the engine starts. A rollout worker has already put its staging copy of the weights (and its CUDA
context) on the device by then, and a ``collective`` channel will add a receive buffer of the same
size at the first pull; a fixed fraction (vLLM's own 0.9 on a GPU of its own) ignores both, so vLLM
refuses to start (7B) or the first pull runs out of memory (1.5B). So the share is computed:

* **available** = (free − :data:`CONTEXT_HEADROOM_BYTES` − receive buffer) / total, from
  ``torch.cuda.mem_get_info`` of the worker's device at engine start; beside the trainer it is also
  capped by the colocated share (``COLOCATED_GPU_MEMORY`` split among the engines there), which keeps
  the trainer's activations room the trainer has not allocated yet;
* **need** = vLLM's weights + the KV cache of ``max_num_seqs`` (else the rows of one step) sequences
  of ``max_model_len`` positions (else ``task.max_prompt_length`` + ``rollout.max_new_tokens``), at
  least one sequence of the engine's longest, + :data:`MARGIN_BYTES`;
  KV bytes = 2 × layers × kv_heads × head_dim × dtype bytes × sequences × positions;
* the share is the smaller of the two. When not even the weights plus one sequence's KV cache fit
  the available share, the worker refuses in one line (vLLM would refuse, or the pull would fail).
  Between that floor and the need vLLM runs with fewer sequences at once.

The user's own ``gpu_memory_utilization`` or ``kv_cache_memory_bytes`` is passed as given (vLLM is
still told ``max_num_seqs``, ``max_model_len`` and ``max_num_batched_tokens``:
:func:`asyncrl.runtime.engines.vllm_sizes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncrl.core.loader import ConfigError  # no torch at import: asyncrl plan reads this arithmetic

GIB = 2**30
# outside vLLM's share: the CUDA graphs it captures, NCCL's own buffers for a collective pair, and
# allocator fragmentation (the worker's CUDA context is already counted: the staging copy made it)
CONTEXT_HEADROOM_BYTES = 1 * GIB
# inside the share, besides weights and KV: vLLM's profiling peak (activations and sampler of one
# scheduler step at its default batched-token budget) and its non-torch allocations
MARGIN_BYTES = 2 * GIB
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class KVShape:
    """What the KV cache's size depends on."""

    layers: int
    kv_heads: int
    head_dim: int
    dtype_bytes: int
    max_positions: int  # the model's max_position_embeddings: vLLM's max_model_len when none is given

    def bytes_per_token(self) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def kv_shape(config, dtype: str) -> KVShape:
    """The :class:`KVShape` of a transformers config (``text_config`` inside a multimodal one)."""
    config = getattr(config, "text_config", None) or config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return KVShape(layers=config.num_hidden_layers, kv_heads=getattr(config, "num_key_value_heads", None) or heads,
                   head_dim=head_dim, dtype_bytes=DTYPE_BYTES[dtype],
                   max_positions=getattr(config, "max_position_embeddings", 0) or 0)


@dataclass(frozen=True)
class Need:
    """Bytes vLLM needs: its weights, the KV cache of ``seqs`` × ``positions``, the margin; and the
    floor below which it cannot start (one sequence of the engine's longest)."""

    weights: int
    kv: int
    seqs: int
    positions: int
    longest: int  # positions of the engine's longest sequence (its max_model_len)
    floor_kv: int

    @property
    def total(self) -> int:
        return self.weights + self.kv + MARGIN_BYTES

    @property
    def floor(self) -> int:
        return self.weights + self.floor_kv + MARGIN_BYTES


def need(shape: KVShape, weight_bytes: int, seqs: int, positions: int, engine_max_len: int = 0) -> Need:
    """vLLM's need for ``seqs`` sequences of ``positions``; ``engine_max_len``: the max_model_len
    vLLM will use (one such sequence must fit its KV cache), 0 = ``positions``."""
    per_token = shape.bytes_per_token()
    longest = max(engine_max_len or positions, positions)
    return Need(weights=weight_bytes, kv=per_token * max(seqs * positions, longest), seqs=seqs,
                positions=positions, longest=longest, floor_kv=per_token * longest)


def available_share(device, receive_bytes: int) -> tuple[float, int, int]:
    """(the fraction of the device vLLM may take now, free bytes, total bytes): free minus the
    headroom and the channel's receive buffer, over the total."""
    import torch

    free, total = torch.cuda.mem_get_info(device)
    return max(0.0, (free - CONTEXT_HEADROOM_BYTES - receive_bytes) / total), free, total


def memory_share(device, need_: Need, receive_bytes: int, cap: float = 1.0) -> float:
    """``gpu_memory_utilization`` for an engine starting now on ``device``: min(need, available,
    ``cap``) as fractions of the device; ConfigError (one line) when the floor does not fit."""
    available, free, total = available_share(device, receive_bytes)
    room = min(available, cap)
    if need_.floor > room * total:
        where = f"within the share cap {cap:.3f} " if cap < available else ""
        raise ConfigError("rollout.engine_kwargs", (
            f"vLLM on {device} needs at least {need_.floor / GIB:.1f} GiB (weights {need_.weights / GIB:.1f} + "
            f"KV of one {need_.longest}-position sequence {need_.floor_kv / GIB:.1f} + margin {MARGIN_BYTES / GIB:.0f}) but only "
            f"{room * total / GIB:.1f} GiB {where}can be given to it ({free / GIB:.1f} of {total / GIB:.1f} GiB free, "
            f"less {CONTEXT_HEADROOM_BYTES / GIB:.0f} GiB headroom and a {receive_bytes / GIB:.1f} GiB receive buffer); "
            "use a GPU with more memory, fewer engines per GPU, or set gpu_memory_utilization yourself"))
    return min(need_.total / total, room)
