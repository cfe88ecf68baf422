"""Runtime micro-benchmarks through asyncrl's own seams, for one GPU (runs on CPU with --size tiny):

* the weight channel: trainer publish, and a pull in a separate (spawned) process, per step;
* decode speed of the transformers engine (generation dtype, batch × new tokens);
* one trainer minibatch update (autocast) and the proximal policy: recompute vs log-linear.

    python benchmarks/gpu_runtime.py                       # 0.5B and 1.5B shapes on cuda
    python benchmarks/gpu_runtime.py --size tiny --device cpu --batch 8 --new-tokens 8   # smoke

Every shape is run once before it is timed; the best of ``--reps`` timings is reported. Prints one
JSON object per size and writes them to ``--out`` (default: gpu_runtime.json).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch.multiprocessing as tmp
from transformers import Qwen2Config, Qwen2ForCausalLM

SIZES = {
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=128, vocab_size=512),
    "0.5B": dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                 intermediate_size=4864, vocab_size=151936),
    "1.5B": dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                 intermediate_size=8960, vocab_size=151936),
}


class _Tok:
    """The three ids an engine needs from a tokenizer (no text is decoded here)."""

    pad_token_id, eos_token_id = 0, -1  # eos never sampled: every sequence runs to the limit


def build(size: str, device: str) -> Qwen2ForCausalLM:
    cfg = Qwen2Config(max_position_embeddings=2048, tie_word_embeddings=True, **SIZES[size])
    cfg._attn_implementation = "sdpa"
    with torch.device(device):
        return Qwen2ForCausalLM(cfg)


def sync(device: str) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def best(fn, device: str, reps: int) -> float:
    fn()  # warm the shape
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - t0)
    return min(times)


def _puller(channel, model, device, gen_dtype, requests, results) -> None:
    model = model.to(device=device, dtype=gen_dtype)
    while (want := requests.get()) is not None:
        while channel.latest() < want:
            pass
        t0 = time.perf_counter()
        channel.pull(model)
        sync(device)
        results.put(time.perf_counter() - t0)


def channel_times(model, device: str, gen_dtype: torch.dtype, reps: int) -> dict:
    from asyncrl.runtime.channels import channel_name, open_channel

    ctx = tmp.get_context("spawn")
    name = channel_name("auto", "local", device)
    channel = open_channel(name, model, ctx=ctx, device=device, dtype=gen_dtype)
    requests, results = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_puller, args=(channel, build_like(model), device, gen_dtype, requests, results))
    proc.start()
    publish, pull = [], []
    for version in range(1, reps + 2):
        t0 = time.perf_counter()
        channel.publish(model, version)
        publish.append(time.perf_counter() - t0)
        requests.put(version)
        pull.append(results.get(timeout=600))
    requests.put(None)
    proc.join(timeout=60)
    # the first round warms both sides
    return {"channel": name, "publish_s": min(publish[1:]), "pull_s": min(pull[1:])}


def build_like(model) -> torch.nn.Module:
    return Qwen2ForCausalLM(model.config)  # CPU, random: the pull overwrites every weight


def engine_speed(model, device: str, dtype: str, batch: int, new_tokens: int, reps: int) -> float:
    from asyncrl.rollout import EngineSpec, make_engine

    spec = EngineSpec(max_new_tokens=new_tokens, temperature=1.0, device=device, dtype=dtype)
    engine = make_engine("transformers", spec, model=model, tokenizer=_Tok())
    vocab = model.config.vocab_size
    prompts = torch.randint(1, vocab, (batch, 64)).tolist()
    return batch * new_tokens / best(lambda: engine.generate(prompts), device, reps)


def trainer_times(model, device: str, batch: int, reps: int) -> dict:
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.objectives import apply_loglinear, loglinear_plan
    from asyncrl.trainer import Trainer
    from asyncrl.types import Batch

    vocab, seq = model.config.vocab_size, 256
    rows = 4 * batch
    ids = torch.randint(1, vocab, (rows, seq))
    mask = torch.ones(rows, seq, dtype=torch.bool)
    versions = torch.randint(0, 4, (rows, seq))
    data = Batch(prompt_ids=ids[:, :64], prompt_mask=mask[:, :64], completion_ids=ids[:, 64:],
                 behav_logp=-torch.rand(rows, seq - 64), versions=versions[:, 64:], completion_mask=mask[:, 64:],
                 rewards=torch.rand(rows), group_ids=torch.arange(rows) // 4, advantages=torch.zeros(rows))
    trainer = Trainer(model, TrainerConfig(n_minibatches=4, lr=1e-6, autocast="bfloat16" if device != "cpu"
                                           else "none"), LossConfig())
    step = best(lambda: trainer.step(data), device, reps) / 4
    gpu = data.to(device)
    with torch.no_grad():
        recompute = best(lambda: trainer.logprobs(gpu.rows(0, batch)), device, reps)
        logp = trainer.logprobs(gpu.rows(0, batch))[0]
    base, weights = loglinear_plan(gpu.behav_logp[:batch], gpu.versions[:batch], 4)
    loglinear = best(lambda: apply_loglinear(base, logp, weights), device, reps)
    return {"train_minibatch_s": step, "recompute_fwd_s": recompute, "loglinear_prox_s": loglinear,
            "recompute_over_loglinear": recompute / loglinear, "minibatch": [batch, seq]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", nargs="+", default=["0.5B", "1.5B"], choices=list(SIZES))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--gen-dtype", default="bfloat16", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", type=int, default=256, help="decode batch (train minibatch: batch / 16)")
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", default="gpu_runtime.json")
    args = parser.parse_args()
    results = {}
    for size in args.size:
        model = build(size, args.device)
        row = {"params_M": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
               "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"}
        row.update(channel_times(model, args.device, getattr(torch, args.gen_dtype), args.reps))
        row["decode_tok_per_s"] = engine_speed(model, args.device, args.gen_dtype, args.batch, args.new_tokens,
                                               args.reps)
        row.update(trainer_times(model, args.device, max(1, args.batch // 16), args.reps))
        results[size] = row
        print(json.dumps({size: row}), flush=True)
        del model
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
