"""Peak memory and time of one ``Learner.step`` with a Qwen-sized vocabulary: the full-logits
log-probs ("legacy", the implementation before the chunked LM head, copied here and patched into
the trainer) against the chunked LM head ("chunked", asyncrl.policy.logprobs).

A randomly initialised Qwen2 model (tied embeddings, as Qwen2.5-0.5B/1.5B) and a synthetic batch of
``--batch`` sequences of ``--seq`` positions (``--prompt`` of them prompt, left-padded; the
completions right-padded to random lengths, at least 3/4 of the positions) train with the default
loss (decoupled + loglinear, A-3PO). Each variant runs in a fresh child process: one warm-up step
(whose statistics are compared between variants), then ``--steps`` timed steps (median reported).

Peak memory: on CUDA ``torch.cuda.max_memory_allocated`` minus the memory allocated before the
first step; on the CPU the peak resident set (``ru_maxrss``) minus the one after the model, batch
and trainer are built. Both include the optimizer state created at the first step. With
``--baseline process`` the reference point is instead the process before the model is built, so the
peak also holds the parameters: the figure ``asyncrl plan`` estimates (tests/foundation/test_plan.py).
On the CPU that mode also makes the resident set follow the allocated bytes and leaves out the
first step's code pages (``_process_baseline``).

    .venv/bin/python benchmarks/trainer_memory.py --batch 16 --seq 1024 --prompt 64 --out trainer_memory.json
    .venv/bin/python benchmarks/trainer_memory.py --device cuda --dtype float32 --autocast bfloat16 \\
        --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864 --micro-batch 4
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time

import torch

VARIANTS = ("legacy", "chunked")
COMPARED = ("loss", "grad_norm", "entropy", "ess_frac", "logp_mismatch", "importance_weight_mean")


def legacy_completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *,
                               temperature=1.0, with_entropy=False, **_ignored):
    """The full-logits implementation before chunking: logits [B, P + T, V], fp32 copies of them,
    entropy with its graph. Returns (logp [B, T], entropy [B, T] or None)."""
    from asyncrl.policy.sampling import positions

    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    n = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions(attn)).logits
    logits = logits[:, -n - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids[..., None]).squeeze(-1)
    logp = torch.where(completion_mask, logp, torch.zeros_like(logp))
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.where(completion_mask, entropy, torch.zeros_like(entropy))
    return logp, entropy


def build_model(args) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=args.vocab, hidden_size=args.hidden, intermediate_size=args.intermediate,
                         num_hidden_layers=args.layers, num_attention_heads=args.heads,
                         num_key_value_heads=args.kv_heads, max_position_embeddings=max(2048, args.seq),
                         tie_word_embeddings=True, use_cache=False)
    torch.manual_seed(0)
    with torch.device(args.device):  # initialised where it runs: a 1.5B model's CPU init takes long
        model = Qwen2ForCausalLM(config).to(dtype=getattr(torch, args.dtype))
    if args.grad_ckpt:
        model.gradient_checkpointing_enable()
    return model


def build_batch(args):
    """``--batch`` rows: prompts of ``--prompt`` positions (the first rows left-padded by up to a
    quarter), completions of ``--seq - --prompt`` positions right-padded to random lengths, behavior
    log-probs near those of a uniform policy, groups of 4 with one reward each."""
    from asyncrl.types import Batch

    gen = torch.Generator().manual_seed(1)
    b, p, t = args.batch, args.prompt, args.seq - args.prompt
    prompt_mask = torch.ones(b, p, dtype=torch.bool)
    for row in range(0, b, 2):
        prompt_mask[row, :int(torch.randint(0, p // 4 + 1, (1,), generator=gen))] = False
    lengths = torch.randint(3 * t // 4, t + 1, (b,), generator=gen)
    completion_mask = torch.arange(t)[None, :] < lengths[:, None]
    uniform = -torch.log(torch.tensor(float(args.vocab)))
    batch = Batch(prompt_ids=torch.randint(0, args.vocab, (b, p), generator=gen), prompt_mask=prompt_mask,
                  completion_ids=torch.randint(0, args.vocab, (b, t), generator=gen),
                  behav_logp=torch.where(completion_mask, uniform + 0.05 * torch.randn(b, t, generator=gen), 0.0),
                  versions=torch.where(completion_mask, 0, -1), completion_mask=completion_mask,
                  rewards=(torch.arange(b) % 4 == 0).float(), group_ids=torch.arange(b) // 4,
                  advantages=torch.zeros(b))
    return batch.to(args.device)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def _status_bytes(key: str) -> int:
    """A size from /proc/self/status (``VmRSS``: resident now; ``VmHWM``: its high-water mark)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {key}")


def _process_baseline(args, trainer_module, configs) -> int:
    """The CPU reference point of ``--baseline process``, before the model is built:

    * glibc returns every block of 64 KiB or more to the system when it is freed (a fixed mmap
      threshold), so the resident set follows the bytes allocated, as ``max_memory_allocated`` does
      on CUDA, instead of keeping freed heap it may reuse later;
    * one trainer step of a throwaway 1-layer model has run first, so the code pages and one-time
      buffers that the first forward and backward pass fault in are already resident;
    * the high-water mark is then reset (``/proc/self/clear_refs``), and the baseline is the
      resident set at that moment; the peak is ``VmHWM`` at the end minus it."""
    import ctypes
    import gc

    ctypes.CDLL("libc.so.6").mallopt(-3, 64 * 1024)  # M_MMAP_THRESHOLD
    small = argparse.Namespace(**{**vars(args), "vocab": 512, "hidden": 32, "intermediate": 64, "layers": 1,
                                  "heads": 2, "kv_heads": 1, "batch": 4, "seq": 32, "prompt": 8})
    loss_cfg, trainer_cfg = configs
    trainer_module.Learner(build_model(small), trainer_cfg, loss_cfg).step(build_batch(small))
    gc.collect()
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")  # resets VmHWM to the current resident set (Linux >= 4.0)
    return _status_bytes("VmRSS")


def child(args) -> dict:
    """One variant in this (fresh) process: the warm-up step's statistics, peak memory, step times."""
    import asyncrl.training.trainer as trainer_module
    from asyncrl.config import LossConfig, TrainerConfig

    torch.set_num_threads(args.threads)
    if args.variant == "legacy":
        trainer_module.completion_logprobs = legacy_completion_logprobs
    cfg = TrainerConfig(n_minibatches=args.minibatches, micro_batch_size=args.micro_batch, lr=1e-5,
                        logits_chunk=args.logits_chunk, autocast=args.autocast)
    cuda = args.device.startswith("cuda")
    rss_hwm = args.baseline == "process" and not cuda
    if args.baseline == "process":
        base = _process_baseline(args, trainer_module, (LossConfig(), cfg)) if rss_hwm else torch.cuda.memory_allocated()
    model, batch = build_model(args), build_batch(args)
    trainer = trainer_module.Learner(model, cfg, LossConfig())
    _sync(args.device)
    if args.baseline == "trainer":
        base = torch.cuda.memory_allocated() if cuda else _rss_bytes()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    first = trainer.step(batch)
    times = []
    for _ in range(args.steps):
        _sync(args.device)
        start = time.perf_counter()
        trainer.step(batch)
        _sync(args.device)
        times.append(time.perf_counter() - start)
    top = torch.cuda.max_memory_allocated() if cuda else _status_bytes("VmHWM") if rss_hwm else _rss_bytes()
    return {"variant": args.variant, "peak_mib": (top - base) / 2**20, "step_s": statistics.median(times),
            "step_times_s": times, "first_step": {k: first.get(k) for k in COMPARED}}


def _child_command(args, variant: str) -> list[str]:
    argv = [sys.executable, __file__, "--variant", variant]
    for name, value in vars(args).items():
        if name in ("variant", "out", "variants"):
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv += [flag] if value else []
        else:
            argv += [flag, str(value)]
    return argv


def _relative_difference(a: dict, b: dict) -> float:
    diffs = [abs(a[k] - b[k]) / max(abs(b[k]), 1e-12) for k in COMPARED
             if isinstance(a.get(k), float) and isinstance(b.get(k), float) and a[k] == a[k] and b[k] == b[k]]
    return max(diffs, default=float("nan"))


def report(rows: list[dict], args) -> str:
    """A markdown table: each variant's peak memory and median step time, and against the first."""
    base = rows[0]
    lines = [f"one Learner.step, B x T = {args.batch} x {args.seq} (prompt {args.prompt}), vocabulary "
             f"{args.vocab}, hidden {args.hidden} x {args.layers} layers, {args.device} {args.dtype} "
             f"autocast {args.autocast}, {args.minibatches} minibatches, micro-batch {args.micro_batch}, "
             f"logits_chunk {args.logits_chunk}", "",
             "| variant | peak memory (MiB) | step (s, median) | memory vs first | time vs first | "
             "first step's stats, max rel. diff |", "| --- | --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['variant']} | {row['peak_mib']:.0f} | {row['step_s']:.2f} | "
                     f"{base['peak_mib'] / max(row['peak_mib'], 1e-9):.2f}x lower | "
                     f"{row['step_s'] / base['step_s']:.2f}x | "
                     f"{_relative_difference(row['first_step'], base['first_step']):.1e} |")
    return "\n".join(lines)


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """The Qwen2 shape :func:`build_model` reads (the Qwen vocabulary, a small width by default)."""
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--intermediate", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--kv-heads", type=int, default=2)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(parser)
    parser.add_argument("--batch", type=int, default=16, help="sequences per step")
    parser.add_argument("--seq", type=int, default=1024, help="positions per sequence, prompt included")
    parser.add_argument("--prompt", type=int, default=64, help="prompt positions per sequence")
    parser.add_argument("--minibatches", type=int, default=4, help="optimizer updates per step")
    parser.add_argument("--micro-batch", type=int, default=0, help="trainer.micro_batch_size")
    parser.add_argument("--logits-chunk", type=int, default=1024, help="trainer.logits_chunk")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--autocast", default="none", choices=["none", "bfloat16", "float16"])
    parser.add_argument("--grad-ckpt", action="store_true", help="gradient checkpointing of the decoder layers")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after the warm-up step")
    parser.add_argument("--baseline", default="trainer", choices=["trainer", "process"],
                        help="peak measured from: trainer = after model, batch and trainer are built; "
                             "process = before the model is built (the peak then includes the parameters)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, the first is the base")
    parser.add_argument("--variant", default=None, help=argparse.SUPPRESS)  # set in the child processes
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.variant is not None:
        print(json.dumps(child(args)))
        return
    rows = []
    for variant in args.variants.split(","):
        done = subprocess.run(_child_command(args, variant), capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{variant}: exit {done.returncode}\n{done.stderr[-3000:]}")
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"{variant}: {rows[-1]['peak_mib']:.0f} MiB, {rows[-1]['step_s']:.2f} s", file=sys.stderr)
    print(report(rows, args))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump({"settings": {k: v for k, v in vars(args).items() if k != "variant"}, "rows": rows},
                      handle, indent=2)


if __name__ == "__main__":
    main()
