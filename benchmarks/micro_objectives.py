"""Micro-benchmark of the objectives hot path on one CPU thread.

Times, on a [B, T] = [256, 1024] batch (float32, 75 % of tokens in the loss mask, staleness 0-3):
  - approximate_prox_logp("loglinear")            (A-3PO's proximal approximation)
  - policy_loss("decoupled", prox_logp=...)       forward only, and forward + backward
  - A-3PO: approximate_prox_logp("loglinear"), then policy_loss("decoupled") on it
Each row is the median over --repeats runs after --warmup runs. Usage:

    .venv/bin/python benchmarks/micro_objectives.py [--batch 256] [--length 1024] [--repeats 30]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from asyncrl.objectives import approximate_prox_logp, policy_loss


def _median_ms(fn: Callable[[], object], warmup: int, repeats: int) -> tuple[float, float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def _batch(b: int, t: int, seed: int = 0) -> dict:
    g = torch.Generator().manual_seed(seed)
    logp = -3.0 * torch.rand(b, t, generator=g)
    behav = logp + 0.3 * torch.randn(b, t, generator=g)
    return {
        "logp": logp.requires_grad_(),
        "behav": behav,
        "prox": logp.detach() + 0.1 * torch.randn(b, t, generator=g),
        "adv": torch.randn(b, generator=g),
        "mask": torch.rand(b, t, generator=g) < 0.75,
        "versions": torch.randint(7, 11, (b, t), generator=g),
        "current_version": 10,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    d = _batch(args.batch, args.length)

    def prox() -> torch.Tensor:
        return approximate_prox_logp("loglinear", d["behav"], d["logp"], d["versions"], d["current_version"])

    def loss(backward: bool, **kw) -> None:
        out, _ = policy_loss("decoupled", d["logp"], d["behav"], d["adv"], d["mask"], **kw)
        if backward:
            out.backward()
            d["logp"].grad = None

    with_prox = {"prox_logp": d["prox"]}
    versions = {"versions": d["versions"], "current_version": d["current_version"]}

    def a3po(backward: bool) -> None:  # a trainer minibatch: the proximal log-probs, then the loss
        loss(backward, prox_logp=prox(), **versions)

    rows = [
        ("approximate_prox_logp loglinear", lambda: prox()),
        ("decoupled (prox_logp) forward", lambda: loss(False, **with_prox)),
        ("decoupled (prox_logp) forward+backward", lambda: loss(True, **with_prox)),
        ("A-3PO prox + decoupled forward", lambda: a3po(False)),
        ("A-3PO prox + decoupled forward+backward", lambda: a3po(True)),
    ]
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch [{args.batch}, {args.length}], "
          f"median of {args.repeats} (after {args.warmup} warm-up)")
    print(f"{'operation':<48}{'median ms':>11}{'min ms':>9}")
    for name, fn in rows:
        med, best = _median_ms(fn, args.warmup, args.repeats)
        print(f"{name:<48}{med:>11.2f}{best:>9.2f}")


if __name__ == "__main__":
    main()
