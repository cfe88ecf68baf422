"""Summary of benchmarks/env_latency.sh runs in OUT_DIR: per suite, median delay and arm,
samples/s over the steps after the first (start-up excluded), each other arm's paired ratio to
sync (one per repeat), the share of the ideal gain (ratio − 1) / (ideal − 1), and per-step means
of environment wait, decode, training, trainer idle time, episode duration and episodes in flight.
Arm trl (benchmarks/trl_env_peer.py, TRL's GRPOTrainer) records the same step fields, its tool
time as the environment wait; it has no episode durations or in-flight counts (nan).

The ideal: the sync run's step time over the longer of its training time and its mean episode's
own duration (``episode/duration_mean_s``): a rollout that always keeps a batch's worth of
episodes in flight delivers a batch every average episode instead of every slowest one, and hides
training behind it. The environment-wait target compares the sync step's wait with its longest
episode (``episode/duration_max_s``). Each ratio is reported per pair, with its geometric mean
and paired 95 % interval (t on the log ratios; benchmarks.bench.repeats), marked when it rests on
fewer than 5 pairs; each run's load average at its start and end (``NAME.load``) is kept beside it.
Writes OUT_DIR/summary.json and prints Markdown tables; ``--pack`` also writes OUT_DIR/runs.json.gz
(every run's config, per-step metrics and load) for committing without the run folders.

    python benchmarks/env_latency_summary.py OUT_DIR [--pack]
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: the benchmarks package
from benchmarks.bench.repeats import PROTOCOL_REPEATS, protocol_mark, ratio_stats, share_of_ideal  # noqa: E402

KEYS = {"step_s": "step_time_s", "train_s": "train_time_s", "idle_s": "trainer_wait_s",
        "env_wait_s": "episode/env_wait_s", "decode_s": "episode/decode_s",
        "duration_s": "episode/duration_mean_s", "duration_max_s": "episode/duration_max_s",
        "in_flight": "episode/in_flight_max"}


def run_numbers(run_dir: Path) -> dict:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] > 1 and "step_time_s" in r]
    samples = sum(r.get("batch_samples", 32) for r in rows)
    out = {"steps": len(rows), "samples_per_s": samples / sum(r["step_time_s"] for r in rows)}
    for name, key in KEYS.items():
        values = [r[key] for r in rows if key in r]
        out[name] = statistics.fmean(values) if values else math.nan
    return out


def run_load(out: Path, name: str) -> list[list[float]] | None:
    """[[1, 5, 15-minute load at the start], [... at the end]] of run ``name``; None if not recorded."""
    path = out / f"{name}.load"
    if not path.exists():
        return None
    return [[float(x) for x in line.split()] for line in path.read_text().splitlines() if line.strip()]


def pack(out: Path, names: list[str]) -> None:
    """OUT_DIR/runs.json.gz: {run name: {config, metrics, load}}, written without a timestamp so a
    re-pack of the same runs writes the same bytes."""
    runs = {}
    for name in names:
        d = out / name
        runs[name] = {"config": (d / "config.yaml").read_text() if (d / "config.yaml").exists() else None,
                      "metrics": [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()],
                      "load": run_load(out, name)}
    with open(out / "runs.json.gz", "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(json.dumps(runs, sort_keys=True).encode())


def fmean(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.fmean(values) if values else math.nan


def main(out: Path) -> dict:
    runs: dict = {}
    for d in sorted(p for p in out.iterdir() if (p / "summary.json").exists() and not p.name.startswith("scale-")):
        suite, median, arm, repeat = re.fullmatch(r"(\w+)-m([\d.]+)-(sync|rounds|trl|asyncw?\d+)-r(\d+)", d.name).groups()
        numbers = run_numbers(d)
        numbers["load"] = run_load(out, d.name)
        runs.setdefault((suite, median), {}).setdefault(int(repeat), {})[arm] = numbers
    summary = {}
    for (suite, median), repeats in sorted(runs.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        arms = sorted({a for r in repeats.values() for a in r if a != "sync"})
        entry = {"repeats": repeats, "arms": {}}
        for arm in arms:
            pairs = [r for r in repeats.values() if "sync" in r and arm in r]
            ratios = [p[arm]["samples_per_s"] / p["sync"]["samples_per_s"] for p in pairs]
            ideals = [p["sync"]["step_s"] / max(p["sync"]["train_s"], p["sync"]["duration_s"]) for p in pairs]
            shares = [share_of_ideal(r, i) for r, i in zip(ratios, ideals)]
            shares = [math.nan if x is None else x for x in shares]
            entry["arms"][arm] = {"pairs": len(pairs), "ratios": ratios, "ideal": ideals, "share_of_ideal_gain": shares,
                                  "paired": ratio_stats(ratios)}
        summary[f"{suite}-m{median}"] = entry
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("| suite, median delay | arm | pairs | samples/s (sync → arm) | arm / sync, each pair "
          "| geometric mean [95 % paired CI] | ideal | share of the ideal gain |")
    print("|---|---|---|---|---|---|---|---|")
    for name, entry in summary.items():
        for arm, a in entry["arms"].items():
            sync = fmean(p["sync"]["samples_per_s"] for p in entry["repeats"].values() if "sync" in p)
            mine = fmean(p[arm]["samples_per_s"] for p in entry["repeats"].values() if arm in p)
            st = a["paired"]
            mark = f" {protocol_mark(st['n'])}" if st["n"] < PROTOCOL_REPEATS else ""
            print(f"| {name} | {arm} | {a['pairs']} | {sync:.2f} → {mine:.2f} | {', '.join(f'{r:.2f}' for r in a['ratios'])} "
                  f"| {st['geomean']:.2f} [{st['ci_low']:.2f}, {st['ci_high']:.2f}]{mark} "
                  f"| {fmean(a['ideal']):.2f} | {', '.join(f'{x:+.0%}' for x in a['share_of_ideal_gain'])} |")
    print()
    print("| suite, median delay | arm | step s | env wait s | decode s | train s | trainer idle s "
          "| episode s (mean / max) | in flight (max) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, entry in summary.items():
        for arm in ["sync", *entry["arms"]]:
            rs = [p[arm] for p in entry["repeats"].values() if arm in p]
            if not rs:  # a suite run without sync (arms "trl" alone)
                continue
            print(f"| {name} | {arm} | {fmean(r['step_s'] for r in rs):.2f} | {fmean(r['env_wait_s'] for r in rs):.2f} "
                  f"| {fmean(r['decode_s'] for r in rs):.2f} | {fmean(r['train_s'] for r in rs):.2f} "
                  f"| {fmean(r['idle_s'] for r in rs):.2f} | {fmean(r['duration_s'] for r in rs):.2f} / "
                  f"{fmean(r['duration_max_s'] for r in rs):.2f} | {max(r['in_flight'] for r in rs):.0f} |")
    return summary


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--pack"]
    out_dir = Path(args[0])
    main(out_dir)
    if "--pack" in sys.argv[1:]:
        pack(out_dir, sorted(p.name for p in out_dir.iterdir() if (p / "summary.json").exists()))
