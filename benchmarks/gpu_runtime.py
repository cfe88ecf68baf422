"""The real GPU paths of one asyncrl step, measured through asyncrl's own seams (runs on CPU at --size tiny):

* **weights**: the trainer publishes its fp32 master weights into the weight channel (``cuda`` on a
  GPU: device-to-device, in the generation dtype); a rollout worker in another process pulls them
  into its transformers engine, as ``runtime/worker.py`` does. Publish and pull are timed apart.
* **decode**: tokens/s of the transformers engine at the generation dtype; of vLLM too when it is
  installed (``vllm: not installed`` otherwise).
* **trainer**: one whole ``Learner.step`` at the recipe's shape (rows × (prompt + completion) tokens,
  ``n_minibatches`` updates, micro-batches, bf16 autocast, gradient checkpointing): its time and the
  peak memory it allocates, and the proximal policy's time per step *as the trainer spends it*
  (``prox_time_s`` of ``prox=recompute`` against ``prox=loglinear``: the extra forward pass against
  the log-space interpolation).
* **mismatch**: the log-prob the bf16 generator recorded for its own tokens against the trainer's at
  staleness 0 (``logp_mismatch``), with the LM head in the compute dtype and in fp32.

Every model is built inside the process that uses it, from the Qwen2.5 config of its size (random
init, the real vocabulary of 151,936: no checkpoint is downloaded), and each section runs in a fresh
spawned process so one section's memory never counts in another's. Every shape runs once before it
is timed; the median of ``--reps`` timings is reported.

    python benchmarks/gpu_runtime.py                       # 0.5B and 1.5B shapes on cuda
    python benchmarks/gpu_runtime.py --size tiny --device cpu --rows 8 --completion 8 --reps 1   # smoke

Prints one JSON object per (size, section) and writes them all to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import traceback
from dataclasses import fields

import torch
import torch.multiprocessing as tmp

SIZES = {  # Qwen2.5 configs (hidden, layers, heads, KV heads, MLP, vocab); tiny: a CPU smoke shape
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512),
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936),
    "1.5B": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=151936),
}
SECTIONS = ("weights", "decode", "trainer", "mismatch")


class _Tok:
    """The three ids an engine needs from a tokenizer (no text is decoded here)."""

    pad_token_id, eos_token_id = 0, -1  # eos never sampled: every sequence runs to the limit


def build(size: str, device: str, dtype: torch.dtype = torch.float32):
    """A randomly initialised Qwen2.5-shaped causal LM, built directly on ``device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(max_position_embeddings=4096, tie_word_embeddings=True, **SIZES[size])
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        return Qwen2ForCausalLM(cfg).to(dtype)


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device: str, reps: int) -> list[float]:
    """``fn`` once to warm the shape, then ``reps`` wall times (device work included)."""
    fn()
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return times


def engine(model, device: str, dtype: str, new_tokens: int, *, lm_head_fp32: bool = False):
    from asyncrl.rollout import EngineSpec, make_engine

    spec = EngineSpec(max_new_tokens=new_tokens, temperature=1.0, device=device, dtype=dtype,
                      lm_head_fp32=lm_head_fp32)
    return make_engine("transformers", spec, model=model, tokenizer=_Tok(), engine_kwargs={})


# --- weights: publish (trainer) and pull into the engine (worker) -------------------------------------
def _puller(channel, size, device, gen_dtype, requests, results) -> None:
    worker_engine = engine(build(size, device, getattr(torch, gen_dtype)), device, gen_dtype, 1)
    while (want := requests.get()) is not None:
        while channel.latest() < want:
            time.sleep(0.0005)
        t0 = time.perf_counter()
        version = channel.pull(worker_engine.model)
        worker_engine.update_weights(worker_engine.model, version)
        sync(device)
        results.put(time.perf_counter() - t0)


def weights_section(args, size: str) -> dict:
    from asyncrl.runtime.channels import channel_name, open_channel

    ctx = tmp.get_context("spawn")
    model = build(size, args.device)  # the trainer's fp32 master weights
    name = channel_name("auto", "local", args.device)
    channel = open_channel(name, model, ctx=ctx, device=args.device, dtype=getattr(torch, args.gen_dtype))
    requests, results = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_puller, args=(channel, size, args.device, args.gen_dtype, requests, results))
    proc.start()
    publish, pull = [], []
    try:
        for version in range(1, args.reps + 2):
            t0 = time.perf_counter()
            channel.publish(model, version)
            sync(args.device)
            publish.append(time.perf_counter() - t0)
            requests.put(version)
            pull.append(results.get(timeout=600))
    finally:
        requests.put(None)
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    publish, pull = publish[1:], pull[1:]  # the first round warms both sides
    return {"channel": name, "publish_ms": 1e3 * statistics.median(publish),
            "pull_ms": 1e3 * statistics.median(pull),
            "publish_plus_pull_ms": 1e3 * (statistics.median(publish) + statistics.median(pull))}


# --- decode ------------------------------------------------------------------------------------------
def decode_section(args, size: str) -> dict:
    dtype = getattr(torch, args.gen_dtype)
    eng = engine(build(size, args.device, dtype), args.device, args.gen_dtype, args.decode_tokens)
    vocab = SIZES[size]["vocab_size"]
    prompts = torch.randint(1, vocab, (args.decode_rows, args.prompt)).tolist()
    times = timed(lambda: eng.generate(prompts), args.device, args.reps)
    row = {"transformers_decode_tok_per_s": args.decode_rows * args.decode_tokens / statistics.median(times),
           "decode_shape": [args.decode_rows, args.prompt, args.decode_tokens]}
    row["vllm_decode_tok_per_s"] = _vllm_decode(args, size)
    return row


def _vllm_decode(args, size: str):
    try:
        import vllm  # noqa: F401
    except ImportError:
        return "vllm: not installed"
    import tempfile

    from asyncrl.rollout import EngineSpec, make_engine

    with tempfile.TemporaryDirectory() as folder:
        build(size, "cpu", getattr(torch, args.gen_dtype)).save_pretrained(folder)
        spec = EngineSpec(max_new_tokens=args.decode_tokens, temperature=1.0, device=args.device, dtype=args.gen_dtype)
        eng = make_engine("vllm", spec, model=None, tokenizer=_Tok(), policy_dir=folder,
                          engine_kwargs={"skip_tokenizer_init": True, "gpu_memory_utilization": 0.35,
                                         "max_model_len": args.prompt + args.decode_tokens})
        prompts = torch.randint(1, SIZES[size]["vocab_size"], (args.decode_rows, args.prompt)).tolist()
        times = timed(lambda: eng.generate(prompts), args.device, args.reps)
    return args.decode_rows * args.decode_tokens / statistics.median(times)


# --- trainer -----------------------------------------------------------------------------------------
def synthetic_batch(args, vocab: int, stale: int = 4):
    from asyncrl.types import Batch

    rows, total = args.rows, args.prompt + args.completion
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1, vocab, (rows, total), generator=gen)
    mask = torch.ones(rows, total, dtype=torch.bool)
    versions = torch.randint(0, stale + 1, (rows, 1), generator=gen).expand(rows, args.completion).clone()
    return Batch(prompt_ids=ids[:, :args.prompt], prompt_mask=mask[:, :args.prompt],
                 completion_ids=ids[:, args.prompt:], behav_logp=-10 - torch.rand(rows, args.completion, generator=gen),
                 versions=versions, completion_mask=mask[:, args.prompt:], rewards=torch.rand(rows, generator=gen),
                 group_ids=torch.arange(rows) // 8, advantages=torch.zeros(rows))


def trainer_section(args, size: str) -> dict:
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.training.trainer import Learner

    model = build(size, args.device)
    if args.grad_ckpt:
        model.gradient_checkpointing_enable()
    autocast = "bfloat16" if torch.device(args.device).type == "cuda" else "none"
    data = synthetic_batch(args, SIZES[size]["vocab_size"])
    row = {"train_shape": [args.rows, args.prompt, args.completion], "n_minibatches": args.minibatches,
           "micro_batch_size": args.micro_batch}
    for prox in ("loglinear", "recompute"):
        cfg = TrainerConfig(n_minibatches=args.minibatches, micro_batch_size=args.micro_batch, lr=1e-6,
                            autocast=autocast, prox=prox)
        trainer = Learner(model, cfg, LossConfig())
        stats: list[dict] = []
        if torch.device(args.device).type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = timed(lambda: stats.append(trainer.step(data)), args.device, args.reps)
        row[f"{prox}_step_s"] = statistics.median(times)
        row[f"{prox}_prox_time_s"] = statistics.median(s["prox_time_s"] for s in stats[1:])
        if torch.device(args.device).type == "cuda":
            row[f"{prox}_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        del trainer
    row["recompute_prox_over_loglinear_prox"] = row["recompute_prox_time_s"] / max(row["loglinear_prox_time_s"], 1e-9)
    return row


# --- mismatch ----------------------------------------------------------------------------------------
def mismatch_section(args, size: str) -> dict:
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.training.trainer import Learner
    from asyncrl.types import Batch

    master = build(size, args.device)  # fp32 trainer weights; the generator holds a bf16 copy
    autocast = "bfloat16" if torch.device(args.device).type == "cuda" else "none"
    vocab = SIZES[size]["vocab_size"]
    prompts = torch.randint(1, vocab, (args.decode_rows, args.prompt)).tolist()
    row = {}
    for head_fp32 in (False, True):
        gen_model = build(size, args.device, getattr(torch, args.gen_dtype))
        gen_model.load_state_dict(master.state_dict())
        gen = engine(gen_model, args.device, args.gen_dtype, args.decode_tokens, lm_head_fp32=head_fp32).generate(prompts)
        trainer = Learner(master, TrainerConfig(autocast=autocast), LossConfig(), lm_head_fp32=head_fp32)
        rows = gen.completion_ids.shape[0]
        batch = Batch(**{f.name: getattr(gen, f.name) for f in fields(gen)}, rewards=torch.zeros(rows),
                      group_ids=torch.arange(rows), advantages=torch.zeros(rows))
        with torch.no_grad():
            logp, _ = trainer.logprobs(batch.to(args.device))
        mask = gen.completion_mask.to(args.device)
        diff = (logp - gen.behav_logp.to(args.device)).abs()[mask]
        key = "head_fp32" if head_fp32 else "head_autocast"
        row[f"logp_mismatch_mean_{key}"] = diff.mean().item()
        row[f"logp_mismatch_p99_{key}"] = diff.float().quantile(0.99).item()
        del gen_model, trainer
    return row


RUNNERS = {"weights": weights_section, "decode": decode_section, "trainer": trainer_section,
           "mismatch": mismatch_section}


def _section_child(args, size: str, section: str, queue) -> None:
    try:
        if torch.device(args.device).type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = True
        row = RUNNERS[section](args, size)
    except Exception as err:  # one section's failure is reported, the others still run
        row = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()[-2000:]}
    queue.put(row)


def run_section(args, size: str, section: str) -> dict:
    ctx = tmp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_section_child, args=(args, size, section, queue))
    proc.start()
    try:
        row = queue.get(timeout=args.section_timeout)
    except Exception:
        row = {"error": f"no result within {args.section_timeout} s (exit code {proc.exitcode})"}
    proc.join(timeout=30)
    if proc.is_alive():
        proc.kill()
    return row


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", nargs="+", default=["0.5B", "1.5B"], choices=list(SIZES))
    parser.add_argument("--section", nargs="+", default=list(SECTIONS), choices=SECTIONS)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gen-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--rows", type=int, default=256, help="sequences per step (gpu-gsm8k: 32 x 8)")
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per sequence")
    parser.add_argument("--completion", type=int, default=512, help="completion tokens per sequence")
    parser.add_argument("--decode-rows", type=int, default=64, help="sequences per decode (and mismatch) batch")
    parser.add_argument("--decode-tokens", type=int, default=128, help="new tokens per decoded sequence")
    parser.add_argument("--minibatches", type=int, default=8, help="optimizer updates per step")
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per forward/backward; 0 = minibatch")
    parser.add_argument("--no-grad-ckpt", dest="grad_ckpt", action="store_false")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--section-timeout", type=float, default=900)
    parser.add_argument("--out", default="gpu_runtime.json")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    results = {"device": device_name, "torch": torch.__version__, "args": vars(args)}
    for size in args.size:
        for section in args.section:
            row = run_section(args, size, section)
            results[f"{size}/{section}"] = row
            print(json.dumps({f"{size}/{section}": {k: v for k, v in row.items() if k != "traceback"}}), flush=True)
            with open(args.out, "w") as f:  # after every section: a later crash keeps the earlier rows
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
