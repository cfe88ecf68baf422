"""``asyncrl plan``'s per-GPU table against a fake-tensor trace on the CPU, GPU role by GPU role.

Each GPU role of a job (:func:`asyncrl.plan.gpus.job_gpus`) is rebuilt with fake tensors
(``torch._subclasses.fake_tensor.FakeTensorMode``: shapes and dtypes, no memory, no arithmetic) and
its tensors are counted by :class:`LiveBytes`, a ``TorchDispatchMode`` that sums the bytes of every
storage alive after each operation (storages FSDP2 resizes are read again each time):

* a trainer rank: a Qwen2 model of the plan's shape in ``policy.dtype``, sharded with FSDP2 over a
  fake process group (``torch.testing._internal.distributed.fake_pg``, backend ``fake``; as rank 0
  with its generation replica, or as rank 1 without), two optimizer updates of a minibatch under
  bf16 autocast, each a forward and backward pass of the log-probs
  (``asyncrl.policy.logprobs.completion_logprobs``) and an AdamW step (fused on one rank, foreach on
  shards, as the trainer), then the replica's refresh (``stream_into``) and a checkpoint's gather
  (``master_state``). The loss is a sum of log-probs (the objective's own tensors are a few [rows, T]
  vectors); every completion position counts (the data-dependent ``nonzero`` of the mask is
  answered as all-true). The peak is the plan's "trainer peak";
* a rollout GPU: the staging copy (the model in ``rollout.dtype``) and the collective channel's
  receive buffer (one flat tensor of every published element);
* rank 0's weight channel buffers: as many such flat tensors as the plan counts (two for CUDA IPC;
  for ``collective``, one per rollout worker plus one).

Not traced, the same number on both sides (the JSON says which): each process's CUDA context and
vLLM's share, which is a reservation sized by rule (:mod:`asyncrl.rollout.vllm_memory`), not tensors.
``--layers N`` traces N decoder layers and scales the layers' share of the peak to the model's
(the trace at N and 2N layers gives the per-layer bytes).

    .venv/bin/python benchmarks/plan_trace.py --out benchmarks/results/2026-11-27-plan/plan_trace.json
    .venv/bin/python benchmarks/plan_trace.py --job 7B-8 --layers 4
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.weak import WeakIdKeyDictionary

# the recipe's vLLM arguments without its fixed 0.35: the share sized from the KV need
KV_SIZED = ["rollout.engine_kwargs={dtype: bfloat16, max_model_len: 1024}"]
ROLLOUT_GPU = ["async.backend=ray", "async.gpus_per_worker=1", "async.weight_channel=collective"]
# (model, trainer GPUs, overrides of the gpu-gsm8k recipe): one vLLM worker beside the trainer at
# 1.5B (the recipe), a rollout GPU of its own beside 8 and 32 trainer GPUs
JOBS = {"1.5B-1": ("1.5B", 1, KV_SIZED), "7B-8": ("7B", 8, KV_SIZED + ROLLOUT_GPU),
        "32B-32": ("32B", 32, KV_SIZED + ROLLOUT_GPU),
        # the tests' job: a tiny Qwen2 shape on 2 ranks and a rollout GPU, a small batch (seconds)
        "tiny-2": ("tiny", 2, KV_SIZED + ROLLOUT_GPU + ["rollout.prompts_per_step=4", "rollout.samples_per_prompt=4",
                                                     "rollout.max_new_tokens=64", "trainer.n_minibatches=2"])}
UNTRACED = ("CUDA context", "their CUDA contexts", "vLLM share")


class LiveBytes(TorchDispatchMode):
    """Bytes of the storages alive now (``now``) and at most (``peak``) since entering; tensors made
    before entering count once :meth:`add` names them."""

    def __init__(self):
        super().__init__()
        self.storages = WeakIdKeyDictionary()
        self.peak = 0

    def add(self, *tensors) -> None:
        from torch.distributed._tools.common_utils import get_untyped_storages

        for tensor in tensors:
            for storage in get_untyped_storages(tensor):
                self.storages[storage] = True
        self.peak = max(self.peak, self.now)

    @property
    def now(self) -> int:
        return sum(storage.nbytes() for storage in self.storages.keys())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.nonzero.default:  # every completion position counts
            out = torch.arange(args[0].numel(), device=args[0].device).unsqueeze(1)
        else:
            out = func(*args, **(kwargs or {}))
        self.add(*[t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)])
        return out


def build_model(shape, layers: int, dtype: torch.dtype, grad_ckpt: bool):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
                         num_hidden_layers=layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
                         tie_word_embeddings=shape.tied, use_cache=False, attn_implementation="sdpa")
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in its dtype: a fake tensor cannot be swapped by .to()
    try:
        model = Qwen2ForCausalLM(config)
    finally:
        torch.set_default_dtype(default)
    if grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def _batch(p, rows: int):
    prompt_mask = torch.ones(rows, p.prompt_tokens, dtype=torch.bool)
    prompt_mask[0, 0] = False  # a left-padded prompt: the padding mask the plan counts
    return (torch.zeros(rows, p.prompt_tokens, dtype=torch.long), prompt_mask,
            torch.zeros(rows, p.new_tokens, dtype=torch.long), torch.ones(rows, p.new_tokens, dtype=torch.bool))


def trace_trainer(p, rank: int, layers: int) -> tuple[int, int]:
    """(peak bytes of ``rank``'s trainer while it loads and shards the model, peak bytes over two
    updates, the replica's refresh and a checkpoint gather)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from asyncrl.training import fsdp
    from asyncrl.plan.estimate import DTYPE_BYTES

    mesh = None
    if p.gpus > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.testing._internal.distributed.fake_pg import FakeStore

        torch.distributed.init_process_group("fake", store=FakeStore(), rank=rank, world_size=p.gpus)
        mesh = init_device_mesh("cpu", (p.gpus,))  # outside fake mode: it reads its ranks
    gen = {2: torch.bfloat16, 4: torch.float32}[DTYPE_BYTES[p.rollout_dtype]]
    rows, _ = p.forward_rows()
    with FakeTensorMode():
        # built before the count starts (transformers' construction transients are not a load's)
        model = build_model(p.model, layers, getattr(torch, p.weight_dtype), p.grad_ckpt)
        with LiveBytes() as live:
            live.add(*model.parameters(), *model.buffers())
            replica = fsdp.generation_replica(model, gen) if p.gpus > 1 and rank == 0 else None
            root = model if mesh is None else _shard(model, mesh, p)
            del model
            live.add(*root.parameters(), *root.buffers(), *([] if replica is None else replica.parameters()))
            load, live.peak = live.peak, live.now
            _two_updates(root, p, rows, sharded=mesh is not None)
            if mesh is not None:
                fsdp.stream_into(root, replica, gen)
                fsdp.master_state(root, keep=False)
    return load, live.peak


def _two_updates(root, p, rows: int, sharded: bool) -> None:
    """Two optimizer updates of one minibatch, as the trainer makes them (fused AdamW on one rank)."""
    fused = {"foreach": True} if sharded else {"fused": True}
    optimizer = torch.optim.AdamW(root.parameters(), lr=1e-6, **fused)
    logprobs = root if sharded else _plain_logprobs(root, p)
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=p.autocast):
            logp, _ = logprobs(*_batch(p, rows), logits_chunk=p.logits_chunk)
        logp.sum().backward()
        optimizer.step()


def _plain_logprobs(model, p):
    from asyncrl.policy.logprobs import completion_logprobs

    return lambda *batch, **kw: completion_logprobs(model, *batch, **kw)


def _shard(model, mesh, p):
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    from asyncrl.training.fsdp import ShardedPolicy, decoder_layers

    options = {"mesh": mesh, "reshard_after_forward": p.reshard_after_forward}
    if p.fsdp_bf16:
        options["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, **options)
    root = ShardedPolicy(model)
    fully_shard(root, **options)
    return root


def trace_weights(p) -> tuple[int, int]:
    """(bytes of a staging copy in ``rollout.dtype``, bytes of one flat buffer of its published state)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from asyncrl.plan.estimate import DTYPE_BYTES

    gen = {2: torch.bfloat16, 4: torch.float32}[DTYPE_BYTES[p.rollout_dtype]]
    with FakeTensorMode(), LiveBytes() as live:
        model = build_model(p.model, p.model.layers, gen, False)
        live.add(*model.parameters(), *model.buffers())
        staging = live.now
        numel = sum(t.numel() for t in dict(model.named_parameters()).values())  # tied weights once
        flat = torch.empty(numel, dtype=gen)
        receive = live.now - staging
        del flat
    return staging, receive


def job_inputs(name: str):
    from asyncrl.config import load_config
    from asyncrl.plan import estimate

    size, gpus, overrides = JOBS[name]
    cfg = load_config("gpu-gsm8k", overrides, ignore=("task", "reward"))
    shape = estimate.PRESETS.get(size) or estimate.ModelShape("tiny", 256, 8, 4, 2, 1024, 4096, tied=True)
    return estimate.inputs_from_config(cfg, shape, gpus, 64 if shape.name == "tiny" else 256), overrides


def _child(name: str, rank: int, layers: int) -> tuple[int, int]:
    """A trainer trace of job ``name`` in a fresh process (a fake process group is its process's one)."""
    out = subprocess.run([sys.executable, __file__, "--child", json.dumps([name, rank, layers])],
                         capture_output=True, text=True, check=True)
    load, step = json.loads(out.stdout.strip().splitlines()[-1])
    return load, step


def trainer_peaks(name: str, p, rank: int, layers: int, here: bool) -> tuple[tuple[int, int], str]:
    """((load, step) traced peaks of the trainer on ``rank``, how): the whole model, or ``layers``
    and twice as many, extrapolated linearly (each layer adds the same bytes); ``here``: in this
    process (a shape on one rank: no process group)."""
    if here:
        return trace_trainer(p, rank, p.model.layers), f"{p.model.layers} layers traced"
    if not layers or layers * 2 >= p.model.layers:
        return _child(name, rank, p.model.layers), f"{p.model.layers} layers traced"
    small, double = _child(name, rank, layers), _child(name, rank, 2 * layers)
    scaled = tuple(int(a + (b - a) / layers * (p.model.layers - layers)) for a, b in zip(small, double))
    return scaled, f"{layers} and {2 * layers} layers traced, scaled to {p.model.layers}"


def trace_job(name: str, layers: int = 0, inputs=None) -> dict:
    """{command, roles: {role: {count, plan: {item: bytes}, trace: {item: bytes}, plan_total,
    trace_total, fits, refused, trainer: {plan/trace step and load peaks, how}}}}."""
    from asyncrl.plan.estimate import DTYPE_BYTES, Rates, memory
    from asyncrl.plan.gpus import job_gpus

    p, overrides = job_inputs(name) if inputs is None else (inputs, [])
    staging, receive = trace_weights(p)
    roles = {}
    for index, role in enumerate(job_gpus(p, Rates())):
        trace, trainer = {}, {}
        for item, (value, _) in role.items.items():
            if item == "trainer peak":
                rank = 1 if index else 0
                (load, step), how = trainer_peaks(name, p, rank, layers, inputs is not None)
                mem = memory(p, Rates(), rank=rank)
                trace[item] = max(load, step)
                trainer = {"plan_step": mem.step_peak, "trace_step": step, "plan_load": mem.load,
                           "trace_load": load if p.gpus > 1 else 0, "how": how}
            elif item in ("staging copy", "channel receive buffer"):
                trace[item] = staging if item == "staging copy" else receive
            elif item == "weight channel buffers":  # the plan's count of flat buffers (cuda 2, collective W + 1)
                trace[item] = value // (p.model.params * DTYPE_BYTES[p.rollout_dtype]) * receive
            elif item == "rollout engines beside it":  # their staging copies traced, vLLM's share by rule
                trace[item] = value - p.rollout_workers * (p.model.params * DTYPE_BYTES[p.rollout_dtype] - staging)
            else:
                trace[item] = value  # UNTRACED: CUDA contexts, vLLM's share
        roles[role.role] = {"count": role.count, "plan": {k: v for k, (v, _) in role.items.items()}, "trace": trace,
                            "plan_total": role.total, "trace_total": sum(trace.values()), "fits": role.fits(Rates()),
                            "refused": role.refused, "trainer": trainer}
    size, gpus, _ = JOBS.get(name, (name, p.gpus, []))
    # --gpus counts every GPU of the job; --trainer-gpus pins this layout rather than letting plan choose
    pinned = ["--gpus", str(gpus + p.dedicated_workers), "--trainer-gpus", str(gpus)] if p.dedicated_workers \
        else ["--gpus", str(gpus)]
    command = shlex.join(["asyncrl", "plan", "--model", size, *pinned, *overrides])
    return {"command": command, "untraced": list(UNTRACED), "roles": roles}


def markdown(results: dict) -> str:
    """docs/scaling.md's per-GPU table of ``results`` (this script's JSON): plan and trace per line."""
    rows = ["| job | GPU | count | plan GiB | trace GiB | trace / plan | fits 80 GiB | trainer peak: plan / trace GiB |",
            "| --- | --- | ---: | ---: | ---: | ---: | --- | --- |"]
    for name, job in results.items():
        for role, line in job["roles"].items():
            trainer = line["trainer"]
            peaks = (f"step {trainer['plan_step'] / 2**30:.2f} / {trainer['trace_step'] / 2**30:.2f}"
                     + (f"; load {trainer['plan_load'] / 2**30:.2f} / {trainer['trace_load'] / 2**30:.2f}"
                        if trainer["plan_load"] else "")) if trainer else "—"
            fits = "yes" if line["fits"] else "no" + (f": {line['refused']}" if line["refused"] else "")
            rows.append(f"| {name} | {role} | {line['count']} | {line['plan_total'] / 2**30:.2f} | "
                        f"{line['trace_total'] / 2**30:.2f} | {line['trace_total'] / line['plan_total']:.3f} | {fits} | "
                        f"{peaks} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--job", choices=list(JOBS), action="append", help="default: every job")
    parser.add_argument("--layers", type=int, default=0,
                        help="for jobs on more than 8 GPUs: trace this many layers and twice as many, scaled")
    parser.add_argument("--out", help="write the JSON here")
    parser.add_argument("--markdown", metavar="JSON", help="print the table of a JSON this script wrote, and stop")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown, encoding="utf-8") as f:
            print(markdown(json.load(f)))
        return
    if args.child:
        name, rank, layers = json.loads(args.child)
        print(json.dumps(trace_trainer(job_inputs(name)[0], rank, layers)))
        return
    names = args.job or [name for name in JOBS if name != "tiny-2"]
    results = {name: trace_job(name, args.layers if JOBS[name][1] > 8 else 0) for name in names}
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
