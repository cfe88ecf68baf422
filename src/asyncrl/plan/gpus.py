"""Every GPU of a job (``asyncrl plan``'s per-GPU table): one line per role, each with what it holds,
its total and whether it fits one GPU of ``Rates.gpu_gib``.

* **trainer rank 0**: the trainer's peak on rank 0 (:func:`asyncrl.plan.estimate.memory`, with its
  generation replica when there are several ranks), its CUDA context, the weight channel's buffers
  and the rollout engines beside it (their vLLM share, staging copies and CUDA contexts);
* **trainer ranks 1..N-1**: the same trainer step without the replica, the channel or engines;
* **rollout GPU** (async workers with a GPU each): the worker's staging copy of the weights in
  ``rollout.dtype``, a ``collective`` channel's receive buffer of the same size, vLLM's share as
  the worker sizes it (:mod:`asyncrl.rollout.vllm_memory`: the smaller of the KV need and what is
  free after the first two, at most ``DEDICATED_GPU_MEMORY``), and the CUDA context. When not even
  the weights and one sequence's KV cache fit, the worker refuses to start: the line does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncrl.plan.estimate import DTYPE_BYTES, GIB, PlanInputs, Rates, memory, vllm_need

# one process's CUDA context on an H100 with CUDA 12 (driver, kernels, cuBLAS workspace): not a
# tensor, so no trace counts it; stated, and added to every process's GPU
CUDA_CONTEXT_BYTES = GIB // 2


@dataclass
class GpuRole:
    """One kind of GPU of the job: ``count`` of them, each holding ``items`` (label → bytes, note)."""

    role: str
    count: int
    items: dict[str, tuple[int, str]] = field(default_factory=dict)
    refused: str = ""  # why the process on it would refuse to start, if it would

    @property
    def total(self) -> int:
        return sum(value for value, _ in self.items.values())

    def fits(self, rates: Rates) -> bool:
        return not self.refused and self.total <= rates.gpu_gib * GIB


def job_gpus(p: PlanInputs, rates: Rates = Rates()) -> list[GpuRole]:
    """The GPU roles of ``p``: trainer rank 0, the other trainer ranks, the dedicated rollout GPUs."""
    roles = [_trainer_rank0(p, rates)]
    if p.gpus > 1:
        follower = memory(p, rates, rank=1)
        roles.append(GpuRole(f"trainer ranks 1-{p.gpus - 1}" if p.gpus > 2 else "trainer rank 1", p.gpus - 1, {
            "trainer peak": (follower.peak, f"shards, activations, FSDP's gathered weights; {follower.peak_moment}"),
            "CUDA context": (CUDA_CONTEXT_BYTES, "the trainer process")}))
    if p.dedicated_workers and p.device == "cuda":
        roles.append(rollout_gpu(p, rates))
    return roles


def _trainer_rank0(p: PlanInputs, rates: Rates) -> GpuRole:
    mem = memory(p, rates)
    what = "params, grads, AdamW" + (" shards, generation replica" if p.gpus > 1 else "") + f"; {mem.peak_moment}"
    items = {"trainer peak": (mem.peak, what), "CUDA context": (CUDA_CONTEXT_BYTES, "the trainer process")}
    if "weight channel buffers" in mem.lines:
        items["weight channel buffers"] = mem.lines["weight channel buffers"]
    engines = p.rollout_workers if p.mode == "async" else 0
    if mem.lines["rollout engine"][0]:
        items["rollout engines beside it"] = mem.lines["rollout engine"]
        if engines:
            items["their CUDA contexts"] = (engines * CUDA_CONTEXT_BYTES, f"{engines} worker process(es)")
    return GpuRole("trainer rank 0", 1, items)


def rollout_gpu(p: PlanInputs, rates: Rates) -> GpuRole:
    """A dedicated rollout worker's GPU, as :func:`asyncrl.runtime.worker.worker_engine_kwargs` sizes it."""
    from asyncrl.rollout import vllm_memory
    from asyncrl.rollout.vllm_engine import DEDICATED_GPU_MEMORY

    weights = p.model.params * DTYPE_BYTES[p.rollout_dtype]
    receive = weights if p.collective else 0
    items = {"staging copy": (weights, f"P·g: the weights in {p.rollout_dtype}, loaded before the engine"),
             "CUDA context": (CUDA_CONTEXT_BYTES, "the worker process")}
    if receive:
        items["channel receive buffer"] = (receive, "collective: P·g, filled at each pull")
    role = GpuRole(f"rollout GPU ({p.engine})", p.dedicated_workers, items)
    if p.engine != "vllm":
        shape, g = p.model, DTYPE_BYTES[p.rollout_dtype]
        items["KV cache"] = (2 * shape.layers * shape.kv_heads * shape.dim * g * p.batch_rows * p.seq, "the batch")
        return role
    gpu = int(rates.gpu_gib * GIB)
    free = gpu - weights - CUDA_CONTEXT_BYTES
    available = min(DEDICATED_GPU_MEMORY * gpu, free - vllm_memory.CONTEXT_HEADROOM_BYTES - receive)
    need = vllm_need(p)
    if not p.kv_sized:
        items["vLLM share"] = (int(p.gpu_mem_util * gpu), "rollout.engine_kwargs: the user's setting")
        return role
    share = max(0, min(need.total, available))
    how = "KV need" if need.total <= available else "all that is free: fewer sequences at once"
    items["vLLM share"] = (share, f"{how}: weights + KV of {need.seqs} × {need.positions} + margin")
    if need.floor > available:
        role.refused = (f"vLLM needs {need.floor / GIB:.1f} GiB (weights + one sequence's KV + margin), "
                        f"{max(0, available) / GIB:.1f} GiB is free for it")
    return role
