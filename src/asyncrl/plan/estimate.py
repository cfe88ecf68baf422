"""Capacity on paper (``asyncrl plan``): per-GPU memory and step time of a run, from its shapes.

Pure arithmetic over a :class:`ModelShape` (a Qwen2.5 preset or a Hugging Face ``config.json``) and
a :class:`PlanInputs` (batch shape, precision, world size, rollout placement); the module imports no
torch (:func:`inputs_from_config` asks the runtime which engines share rank 0's GPU). Every
number is in bytes or seconds; docs/scaling.md ("Capacity planning") states each formula, and
tests/foundation/test_plan.py checks the peak against trainer steps measured on the CPU and against
the H200 runs in benchmarks/results/2026-11-26-gpu.

Memory is that of one trainer rank of an FSDP2 world of ``gpus`` ranks (rank 0, the busiest, by
default; :mod:`asyncrl.plan.gpus` puts every GPU of the job together). What the trainer holds
throughout (parameters, optimizer state, rank 0's generation replica) adds to the largest of four
moments of a step, which never overlap:

* the start of the backward pass: every saved activation, the bf16 weight copies autocast keeps for
  the backward pass, the LM head's chunk buffers, FSDP's gathered root and prefetched layers, and
  the gradients when micro-batches accumulate;
* the end of the backward pass: every gradient, and the tied embedding's dense gradient;
* the optimizer step: gradients and AdamW's temporaries;
* with several ranks, one whole parameter gathered at a time (the replica's refresh, checkpoints:
  asyncrl.training.fsdp); with LoRA, the merged copies of the adapted weights publishing makes.

With LoRA (:mod:`asyncrl.plan.lora`, one trainer rank) only the adapters have gradients and AdamW
state; the frozen base weights stay in their dtype, and the LM head and embeddings get no gradient.

The activation formula is derived for Hugging Face's Qwen2 decoder layer with SDPA attention and a
padding mask (so K/V are repeated to every head and each layer converts the mask to a float bias),
counting what autograd saves (checked tensor by tensor on the CPU).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from asyncrl.plan import lora as lora_shapes
from asyncrl.plan.lora import LoraPlan
from asyncrl.plan.shapes import PRESETS, ModelShape, config_model, model_shape, shape_from_config  # noqa: F401

GIB = 2**30
H100_BF16_DENSE_FLOPS = 989.4e12  # NVIDIA H100 SXM, bf16 tensor cores, dense
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
TABLE_SIZES = ("0.5B", "1.5B", "7B", "32B")
TABLE_GPUS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class Rates:
    """The step-time inputs: rates nobody can read off a config."""

    # a placeholder of the order of vLLM's decode rate for a 1-2B model on one H100 with a few hundred
    # concurrent sequences (not measured here): set it from a run's generation time per step. Per
    # GPU, because a layout with rollout GPUs of their own generates on several (asyncrl.plan.layouts)
    decode_tps: float = 10000.0  # generated tokens per second of one rollout GPU, its engines together
    train_flops: float = 0.4 * H100_BF16_DENSE_FLOPS  # achieved FLOP/s of one trainer GPU
    bus_gbps: float = 50.0  # GB/s a weight byte moves at (NVLink-class)
    gpu_gib: float = 80.0  # memory of one GPU (an H100)


@dataclass(frozen=True)
class PlanInputs:
    """One run on ``gpus`` trainer ranks: the batch shape and precision (from a Config, see
    :func:`inputs_from_config`) and where generation runs."""

    model: ModelShape
    gpus: int = 1
    batch_rows: int = 256  # sequences per step
    minibatches: int = 8  # optimizer updates per step
    micro_batch: int = 0  # rows per forward pass; 0 = a rank's whole share of the minibatch
    prompt_tokens: int = 256
    new_tokens: int = 512
    weight_dtype: str = "float32"  # master weights (and AdamW state)
    autocast: bool = True  # trainer.autocast (bfloat16 or float16: both 2 bytes) over fp32 weights
    fsdp_bf16: bool = False  # trainer.fsdp.param_dtype=bfloat16
    reshard_after_forward: bool = True
    grad_ckpt: bool = True
    logits_chunk: int = 1024
    lm_head_fp32: bool = False
    device: str = "cuda"
    mode: str = "async"  # sync | async | simulated
    engine: str = "vllm"
    rollout_dtype: str = "bfloat16"
    gpu_mem_util: float = 0.35  # vLLM's share of rank 0's GPU, all its engines there together
    kv_sized: bool = True  # no memory setting of the user's: each engine takes min(its share, its KV need)
    vllm_seqs: int = 0  # engine_kwargs.max_num_seqs; 0 = the rows of a step
    vllm_positions: int = 0  # engine_kwargs.max_model_len; 0 = prompt + new tokens
    dedicated_workers: int = 0  # async rollout workers on GPUs of their own (Ray, async.gpus_per_worker >= 1)
    collective: bool = False  # the collective channel: each worker receives into a buffer on its GPU
    channel_buffers: int = 0  # async.channel_buffers: the collective channel's cap; 0 = workers + 1
    rollout_workers: int = 1  # rollout engines on rank 0's GPU (async workers; 1 in a sync run)
    cuda_channel: bool = True  # async weights through the CUDA IPC channel (two buffers on the GPU)
    kl_reference: bool = False  # trainer.kl_coef > 0: a frozen copy of the weights on every rank
    extra_forwards: int = 0  # no-grad forward passes per step: trainer.prox=recompute, the KL reference
    lora: LoraPlan | None = None  # policy.lora_rank > 0: only these adapters train

    def __post_init__(self):
        for name in ("gpus", "batch_rows", "minibatches", "prompt_tokens", "new_tokens", "logits_chunk"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.batch_rows % self.minibatches:
            raise ValueError(f"minibatches: must divide the batch of {self.batch_rows} rows")
        if self.lora is not None and self.gpus > 1:
            raise ValueError("policy.lora_rank: LoRA runs with one trainer process only")

    @property
    def seq(self) -> int:
        return self.prompt_tokens + self.new_tokens

    @property
    def minibatch_rows(self) -> int:
        return self.batch_rows // self.minibatches

    def forward_rows(self) -> tuple[int, bool]:
        """(rows of one forward pass on rank 0, whether gradients accumulate over several passes),
        as asyncrl.training.data_parallel splits a minibatch over ranks and micro-batches."""
        if self.minibatch_rows < self.gpus:
            raise ValueError(f"gpus: each minibatch ({self.minibatch_rows} rows) needs at least one row per "
                             f"trainer rank ({self.gpus})")
        share = math.ceil(self.minibatch_rows / self.gpus)
        if self.micro_batch <= 0 or self.micro_batch >= share:
            return share, False
        if self.gpus == 1:  # asyncrl.training.steps.micro_bounds: passes of micro_batch rows
            return self.micro_batch, True
        return math.ceil(share / math.ceil(share / self.micro_batch)), True  # shares of the share


def precision(p: PlanInputs) -> tuple[int, int, bool]:
    """(r, a, cast): bytes of the residual stream (the layers' parameter dtype), of the activations
    the matmuls read, and whether autocast makes bf16 copies of the weights and of the matmul inputs."""
    w = DTYPE_BYTES[p.weight_dtype]
    r = 2 if p.fsdp_bf16 and p.gpus > 1 else w
    cast = p.autocast and r == 4
    return r, (2 if cast else r), cast


def layer_bytes_per_token(shape: ModelShape, r: int, a: int, cast: bool) -> int:
    """Bytes one decoder layer saves for the backward pass, per token position:

        h·(8 + 2r + 5a + c) + 4a·I,  c = 5a with autocast (bf16 copies of the 5 matmul inputs), else 2r

    8 + 2r: each RMSNorm keeps its float32 input and its normalised output; 5a: q, the repeated k
    and v, the attention output and o_proj's input; 4a·I: SwiGLU's gate, silu(gate), up, product.
    float32: 44h + 16I; bf16 autocast over float32 weights: 36h + 8I; bf16 weights: 26h + 8I.
    (For head_dim·heads ≠ hidden the attention terms use heads·head_dim.)"""
    h, qh = shape.hidden, shape.heads * shape.dim
    c = 5 * a if cast else 2 * r
    return h * (8 + 2 * r + c) + 5 * a * qh + 4 * a * shape.intermediate


def activations(p: PlanInputs, rows: int, checkpointed: bool) -> int:
    """Saved activations of one forward pass of ``rows`` sequences of ``p.seq`` positions.

    Without checkpointing: L layers of :func:`layer_bytes_per_token` per position, plus each layer's
    float copy of the [rows, 1, s, s] padding mask (a bytes per element). With checkpointing
    (non-reentrant, per layer): each layer keeps only its input (r·h per position) and the boolean
    mask, and the backward pass recomputes one layer at a time. Either way: the final norm
    ((4 + r)·h), RoPE's cos and sin (2·head_dim·r) per position, and the completion positions'
    hidden states that the chunked LM head keeps (r·h each). With LoRA the frozen layers keep less
    and the adapters add theirs (:func:`asyncrl.plan.lora.layer_bytes_per_token`)."""
    shape, (r, a, cast) = p.model, precision(p)
    tokens, s = rows * p.seq, p.seq
    if p.lora is None:
        per_token = layer_bytes_per_token(shape, r, a, cast)
    else:
        mask_bytes = 1 if p.device == "cuda" else 4  # CUDA's dropout keeps a bool mask, the CPU's a float one
        per_token = lora_shapes.layer_bytes_per_token(shape, p.lora, r, a, p.autocast, mask_bytes)
    layer = per_token * tokens + rows * s * s * a
    if checkpointed:
        body = shape.layers * r * shape.hidden * tokens + rows * s * s + layer
    else:
        body = shape.layers * layer
    per_position = (4 + (0 if p.lora else r)) * shape.hidden + 2 * shape.dim * r  # frozen norm: no output kept
    return body + per_position * tokens + r * shape.hidden * rows * p.new_tokens


def autocast_copies(p: PlanInputs) -> int:
    """bf16 copies of the layers' weights that autocast makes in the forward pass and the backward
    pass reads: every layer's, or one layer's at a time with checkpointing; none without autocast.
    LoRA's float32 adapters are copied under autocast whatever the base weights' dtype."""
    shape = p.model
    layers = 1 if p.grad_ckpt else shape.layers
    base = 2 * shape.layer_params * layers if precision(p)[2] else 0
    adapters = 0
    if p.lora is not None and p.autocast:
        adapters = 2 * lora_shapes.adapter_params(shape, p.lora) // shape.layers * layers
    return base + adapters


def logits_chunk_bytes(p: PlanInputs, rows: int) -> int:
    """The LM head's peak (asyncrl.policy.logprobs), in its backward pass: a chunk of c = min(
    logits_chunk, rows·new_tokens) positions × V float32 log-probs and probabilities, the float32
    [V, H] gradient it accumulates plus one chunk's [V, H] product, and with a bf16 head its bf16
    weight copy, logits gradient and product. A frozen head (LoRA) has no [V, H] gradient."""
    shape, (r, _, cast) = p.model, precision(p)
    c = min(p.logits_chunk, rows * p.new_tokens)
    cv, vh = c * shape.vocab, shape.vocab * shape.hidden
    head = 4 if p.lm_head_fp32 else (2 if cast else r)  # the matmul's dtype; r: the weight's
    low = head != 4
    head_grad = 0 if p.lora else 4 * vh + (vh * head if low else 0)  # accumulator's chunk product
    inner = (cv * head if low else 0) + head_grad
    weight_copy = vh * head if head != r else 0
    return (0 if p.lora else 4 * vh) + weight_copy + 4 * cv + max(4 * cv, inner)


def rollout_share(p: PlanInputs, rates: Rates) -> tuple[int, str]:
    """(bytes on rank 0's GPU for generation, how). vLLM: its engines' share of the GPU (each
    engine's the smaller of its share and its KV need: :func:`vllm_need`), plus in an async run each
    worker's staging copy of the weights in the generation dtype (the channel fills it, the engine
    loads from it); transformers workers (async): weights + a KV cache of the whole batch each; none
    for generation in the trainer process between steps, or off the GPU."""
    shape, g = p.model, DTYPE_BYTES[p.rollout_dtype]
    if p.device != "cuda" or p.rollout_workers == 0:
        return 0, "no rollout engine on this GPU"
    if p.engine == "vllm":
        staging = p.rollout_workers * shape.params * g if p.mode == "async" else 0
        share = int(p.gpu_mem_util * rates.gpu_gib * GIB)
        how = f"vLLM: {p.gpu_mem_util:g} of the GPU"
        if p.kv_sized and vllm_need(p).total * p.rollout_workers < share:
            share, how = vllm_need(p).total * p.rollout_workers, "vLLM: weights + KV need + margin (under its share)"
        return share + staging, how + (f" + {p.rollout_workers} staging copy of the weights" if staging else "")
    if p.mode != "async":
        return 0, f"{p.mode}: generation runs in the trainer process between training steps"
    kv = 2 * shape.layers * shape.kv_heads * shape.dim * g * p.batch_rows * p.seq
    return p.rollout_workers * (shape.params * g + kv), f"{p.rollout_workers} transformers worker(s): weights + KV"


def vllm_need(p: PlanInputs):
    """One vLLM engine's :class:`asyncrl.rollout.vllm_memory.Need`: weights and the KV cache of
    ``vllm_seqs`` (else a step's rows) × ``vllm_positions`` (else prompt + new) in ``rollout.dtype``."""
    from asyncrl.rollout import vllm_memory

    shape, g = p.model, DTYPE_BYTES[p.rollout_dtype]
    kv = vllm_memory.KVShape(shape.layers, shape.kv_heads, shape.dim, g, max_positions=0)
    return vllm_memory.need(kv, shape.params * g, p.vllm_seqs or p.batch_rows, p.vllm_positions or p.seq)


@dataclass
class Memory:
    """Per-GPU bytes of rank 0: ``lines`` (label → bytes, formula), the trainer's peak and the
    moment it happens, the GPU's total with generation."""

    lines: dict[str, tuple[int, str]] = field(default_factory=dict)
    peak: int = 0
    peak_moment: str = ""
    step_peak: int = 0  # held throughout + the largest moment of a step
    load: int = 0  # several ranks: what a rank holds when it has loaded the whole model, before sharding
    total: int = 0
    rows: int = 0


def memory(p: PlanInputs, rates: Rates = Rates(), rank: int = 0) -> Memory:
    """The trainer's memory on ``rank``'s GPU (see the module's docstring for the moments): rank 0
    also holds the generation replica, the channel's buffers and the engines beside the trainer."""
    shape, n, w = p.model, p.gpus, DTYPE_BYTES[p.weight_dtype]
    rows, accumulate = p.forward_rows()
    P, vh = shape.params, shape.vocab * shape.hidden
    out = Memory(rows=rows)
    used = "checkpointing" if p.grad_ckpt else "no checkpointing"
    shape_note = f"{rows} rows × {p.seq} positions"
    out.lines = {
        **_weight_lines(p),
        "activations, no checkpointing": (activations(p, rows, False),
                                          shape_note + ("" if not p.grad_ckpt else "; not counted")),
        "activations, checkpointing": (activations(p, rows, True),
                                       shape_note + ("" if p.grad_ckpt else "; not counted")),
        "autocast bf16 weight copies": (autocast_copies(p), "2 B × layer params, all layers or 1 (checkpointing)"),
        "log-prob logits chunk": (logits_chunk_bytes(p, rows),
                                  f"{min(p.logits_chunk, rows * p.new_tokens)} positions × V, backward"),
    }
    grads = out.lines["gradients"][0]
    unsharded = fsdp_unsharded(p) if n > 1 else 0
    # the root stays whole through the step; the layers' gathered weights and gradient come after
    # the LM head's chunk buffers are freed (the head's backward runs first) and are gone by the end
    root = shape.root_params * (2 if p.fsdp_bf16 else w) if n > 1 else 0
    head_or_layers = max(out.lines["log-prob logits chunk"][0], unsharded - root)
    start = (out.lines[f"activations, {used}"][0] + autocast_copies(p) + root + head_or_layers
             + (grads if accumulate else 0))
    if n > 1:
        out.lines["FSDP gathered root + layers"] = (unsharded, "embeddings/head whole + 2 layers, + 1 layer's grad")
    tied_grad = vh * w if shape.tied and n == 1 and p.lora is None else 0
    end = grads + tied_grad + (shape.root_params * 4 + root if n > 1 else 0)
    moments = {"backward start": start, "backward end": end, "optimizer step": grads + optimizer_temporaries(p)}
    static = out.lines["parameters"][0] + out.lines["AdamW state"][0]
    if n > 1:
        largest = 4 * largest_param(shape)
        out.lines["largest parameter gathered"] = (largest, "one whole parameter at a time, float32 at most "
                                                            "(replica refresh, checkpoints): the largest")
        moments["parameter gather"] = grads + largest
        if rank == 0:
            replica = P * DTYPE_BYTES[p.rollout_dtype]
            out.lines["generation replica"] = (replica, f"rank 0's model in rollout.dtype ({p.rollout_dtype}): "
                                                        "generation, evaluation, publishing")
            static += replica
    if p.lora is not None:
        merged = lora_shapes.adapted_params(shape, p.lora) * w
        out.lines["merged adapted weights"] = (merged, "publishing, checkpoints: a copy of each adapted W + scale·B A")
        moments["adapter merge"] = grads + merged
    if p.kl_reference and p.lora is None:  # LoRA's reference is the same module with its adapters off
        out.lines["KL reference"] = (P * w, "frozen starting weights, every rank")
        static += P * w
    out.peak_moment, dynamic = max(moments.items(), key=lambda item: item[1])
    out.peak = out.step_peak = static + dynamic
    if n > 1:  # each rank loads the whole model (rank 0 makes its replica from it), then shards it
        out.lines["whole weights at load"] = (P * w, "every rank, before FSDP shards them (start-up)")
        out.load = P * w + (out.lines["generation replica"][0] if rank == 0 else 0)
        if out.load > out.peak:
            out.peak, out.peak_moment = out.load, "loading, before sharding"
    if rank != 0:
        out.total = out.peak
        return out
    channel, how = channel_buffers(p)
    if how:  # a line also when the channel keeps nothing on the GPU: it was counted, not forgotten
        out.lines["weight channel buffers"] = (channel, how)
    share, how = rollout_share(p, rates)
    out.lines["rollout engine"] = (share, how)
    out.total = out.peak + channel + share
    return out


def channel_buffers(p: PlanInputs) -> tuple[int, str]:
    """(bytes the weight channel allocates on rank 0's GPU, how), async on CUDA; each buffer is one
    flat copy of the published weights, P·g (a tied head once).

    * ``cuda`` (asyncrl.runtime.channels.flat): two buffers, allocated together at the start.
    * ``collective`` (asyncrl.runtime.channels.collective): one in steady state; a publish that finds
      every buffer held by a send allocates another, and one idle spare is kept. Each worker's
      sending thread holds one buffer at a time, so at most workers + 1 exist (a dead worker's
      thread holds its buffer until its pair is aborted); ``async.channel_buffers`` caps them lower
      (a publish at the cap waits for a send). The smaller bound is counted.
    * ``ray``, ``shm``: nothing on the GPU (a pinned host buffer and Ray's object store; host memory)."""
    if p.mode != "async" or p.device != "cuda":
        return 0, ""
    flat = p.model.params * DTYPE_BYTES[p.rollout_dtype]
    if p.cuda_channel:
        return 2 * flat, "async, CUDA IPC: 2 × P in the generation dtype"
    if p.collective:
        held = p.dedicated_workers + 1
        if 2 <= p.channel_buffers < held:
            return p.channel_buffers * flat, f"collective: P·g each, capped by async.channel_buffers={p.channel_buffers}"
        return held * flat, (f"collective: P·g each, 1 + one per worker whose send a publish overlaps: "
                             f"{held} at most")
    return 0, "ray or shm: the weights go through host memory, none on the GPU"


def rollout_gpus(p: PlanInputs) -> int:
    """GPUs that generate: the async workers' own GPUs, else one (rank 0's, or the CPU)."""
    return p.dedicated_workers if p.dedicated_workers and p.mode == "async" and p.device == "cuda" else 1


def _weight_lines(p: PlanInputs) -> dict[str, tuple[int, str]]:
    """Rank 0's parameters, gradients and AdamW state: shards of every weight, or with LoRA the
    frozen base weights whole plus the float32 adapters, which alone have gradients and AdamW state."""
    shape, n, w = p.model, p.gpus, DTYPE_BYTES[p.weight_dtype]
    P = shape.params
    if p.lora is None:
        return {"parameters": (P * w // n, f"P·{w} B / {n}"), "gradients": (P * w // n, f"P·{w} B / {n}"),
                "AdamW state": (2 * P * w // n, f"exp_avg + exp_avg_sq: 2·P·{w} B / {n}")}
    A, a = lora_shapes.adapter_params(shape, p.lora), lora_shapes.ADAPTER_BYTES
    return {"parameters": (P * w + A * a, f"P·{w} B frozen + {A:,} adapter params · {a} B"),
            "gradients": (A * a, f"adapters only: {A:,} · {a} B"),
            "AdamW state": (2 * A * a, f"adapters only, exp_avg + exp_avg_sq: 2·{A:,} · {a} B")}


def largest_param(shape: ModelShape) -> int:
    """Elements of the model's largest parameter: the embedding (or LM head), else an MLP matrix."""
    return max(shape.vocab, shape.intermediate, shape.heads * shape.dim) * shape.hidden


def optimizer_temporaries(p: PlanInputs) -> int:
    """AdamW's step: fused on one GPU (nothing), foreach on sharded parameters (the square root of
    exp_avg_sq: P·w / N), one tensor at a time on the CPU (two temporaries of the largest one: with
    LoRA, of the largest adapter matrix)."""
    shape, w = p.model, DTYPE_BYTES[p.weight_dtype]
    if p.device == "cpu" and p.lora is not None:
        return 2 * lora_shapes.ADAPTER_BYTES * lora_shapes.largest_adapter(shape, p.lora)
    if p.device == "cpu":
        return 2 * w * largest_param(shape)
    return shape.params * w // p.gpus if p.gpus > 1 else 0


def fsdp_unsharded(p: PlanInputs) -> int:
    """What FSDP2 holds whole on each rank during a forward/backward pass: the root module
    (embeddings, final norm, LM head: the root's forward is the whole log-prob computation), two
    layers' parameters (the current one and the prefetched next; every layer's when
    ``reshard_after_forward`` is off) in the compute dtype, and one layer's float32 gradient."""
    shape = p.model
    pd = 2 if p.fsdp_bf16 else DTYPE_BYTES[p.weight_dtype]
    layers = 2 if p.reshard_after_forward else shape.layers
    return shape.root_params * pd + layers * shape.layer_params * pd + shape.layer_params * 4


@dataclass
class StepTime:
    generation: float
    training: float
    broadcast: float
    step: float
    flop_factor: int
    broadcast_bytes: int
    rollout_gpus: int = 1


def step_time(p: PlanInputs, rates: Rates = Rates()) -> StepTime:
    """Seconds per step. Generation: batch_rows × new_tokens / (decode_tps × the GPUs that generate:
    :func:`rollout_gpus`). Training: f·P·tokens / (gpus × train_flops), tokens = batch_rows × (prompt +
    new), f = 6 (forward + backward) + 2 with checkpointing (the recomputed forward) + 2 per extra
    no-grad forward; with LoRA 4 instead of 6 (the frozen weights get no weight gradient, only the
    input gradient). Weight broadcast: the bytes each step moves over a link of bus_gbps: the FSDP
    gather brings (N − 1)/N of the weights to each rank, and rank 0 sends the generation-dtype weights
    to the engines (none for a sync run generating from its own weights): once, or with the
    ``collective`` channel once per rollout GPU (each worker's pair is a send of its own from rank 0).
    Sync and simulated runs add the three; async overlaps generation with training + broadcast."""
    shape, n, engines = p.model, p.gpus, rollout_gpus(p)
    generation = p.batch_rows * p.new_tokens / (rates.decode_tps * engines)
    factor = (4 if p.lora else 6) + (2 if p.grad_ckpt else 0) + 2 * p.extra_forwards
    training = factor * shape.params * p.batch_rows * p.seq / (n * rates.train_flops)
    gather = shape.params * DTYPE_BYTES[p.weight_dtype] * (n - 1) // n
    sends = engines if p.collective else 1
    publish = 0 if p.mode != "async" and p.engine != "vllm" else sends * shape.params * DTYPE_BYTES[p.rollout_dtype]
    broadcast = (gather + publish) / (rates.bus_gbps * 1e9)
    step = max(generation, training + broadcast) if p.mode == "async" else generation + training + broadcast
    return StepTime(generation, training, broadcast, step, factor, gather + publish, engines)


def inputs_from_config(cfg, shape: ModelShape, gpus: int, prompt_tokens: int, **changes) -> PlanInputs:
    """The :class:`PlanInputs` of a loaded asyncrl Config (``cfg``) for ``shape`` on ``gpus`` ranks."""
    from asyncrl.core.registries import BACKENDS, CHANNELS, MODES
    from asyncrl.distributed.config import param_dtype_of
    from asyncrl.objectives.prox import PROX_STRATEGIES
    from asyncrl.rollout.vllm_engine import COLOCATED_GPU_MEMORY, MEMORY_KEYS
    from asyncrl.runtime.channels import channel_name
    from asyncrl.runtime.worker import engines_beside_trainer, worker_gpu_share

    ro, tr, pol, asy, kw = cfg.rollout, cfg.trainer, cfg.policy, cfg.async_, cfg.rollout.engine_kwargs
    generation = pol.dtype if ro.dtype == "auto" else ro.dtype
    extra = int(PROX_STRATEGIES[tr.prox].needs_forward) + (1 if tr.kl_coef > 0 else 0)
    # rollout engines on rank 0's GPU: the async workers the runtime places there; a sync run
    # generates in its own process. The others (Ray actors asking a GPU each) have GPUs of their own
    workers = MODES[cfg.run.mode].rollout_workers
    engines = engines_beside_trainer(cfg) if workers else 1
    own_gpus = not BACKENDS[asy.backend].workers_on_trainer_gpu and worker_gpu_share(cfg) >= 1
    dedicated = asy.n_workers if workers and own_gpus else 0
    # vLLM's share: the user's per engine (a dedicated GPU's own), else the colocated share split among the engines
    util = float(kw["gpu_memory_utilization"]) * max(engines, 1) \
        if "gpu_memory_utilization" in kw else COLOCATED_GPU_MEMORY * (engines > 0)
    channel = channel_name(asy.weight_channel, asy.backend, pol.device) if workers else ""
    inputs = PlanInputs(model=shape, gpus=gpus, batch_rows=ro.batch_size, minibatches=tr.n_minibatches,
                        micro_batch=tr.micro_batch_size, prompt_tokens=prompt_tokens, new_tokens=ro.max_new_tokens,
                        weight_dtype=pol.dtype, autocast=tr.autocast != "none",
                        fsdp_bf16=param_dtype_of(cfg) == "bfloat16", reshard_after_forward=tr.fsdp.reshard_after_forward,
                        grad_ckpt=pol.gradient_checkpointing, logits_chunk=tr.logits_chunk,
                        lm_head_fp32=pol.lm_head_fp32, device="cuda" if pol.device.startswith("cuda") else "cpu",
                        mode=cfg.run.mode, engine=ro.engine, rollout_dtype=generation, gpu_mem_util=util,
                        kv_sized=not MEMORY_KEYS & set(kw), vllm_seqs=int(kw.get("max_num_seqs") or 0),
                        vllm_positions=int(kw.get("max_model_len") or 0), dedicated_workers=dedicated,
                        collective=channel in CHANNELS and CHANNELS[channel].receive_buffer,
                        channel_buffers=asy.channel_buffers, rollout_workers=engines, cuda_channel=channel == "cuda",
                        kl_reference=tr.kl_coef > 0, extra_forwards=extra,
                        lora=lora_shapes.lora_plan(pol, shape.model_type))
    return replace(inputs, **changes)
