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
episode (``episode/duration_max_s``). Writes OUT_DIR/summary.json and prints Markdown tables.

    python benchmarks/env_latency_summary.py OUT_DIR
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path

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


def fmean(values) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.fmean(values) if values else math.nan


def main(out: Path) -> dict:
    runs: dict = {}
    for d in sorted(p for p in out.iterdir() if (p / "summary.json").exists() and not p.name.startswith("scale-")):
        suite, median, arm, repeat = re.fullmatch(r"(\w+)-m([\d.]+)-(sync|rounds|trl|async\d+)-r(\d+)", d.name).groups()
        runs.setdefault((suite, median), {}).setdefault(int(repeat), {})[arm] = run_numbers(d)
    summary = {}
    for (suite, median), repeats in sorted(runs.items(), key=lambda kv: (kv[0][0], float(kv[0][1]))):
        arms = sorted({a for r in repeats.values() for a in r if a != "sync"})
        entry = {"repeats": repeats, "arms": {}}
        for arm in arms:
            pairs = [r for r in repeats.values() if "sync" in r and arm in r]
            ratios = [p[arm]["samples_per_s"] / p["sync"]["samples_per_s"] for p in pairs]
            ideals = [p["sync"]["step_s"] / max(p["sync"]["train_s"], p["sync"]["duration_s"]) for p in pairs]
            shares = [(r - 1) / (i - 1) if i > 1 else math.nan for r, i in zip(ratios, ideals)]
            entry["arms"][arm] = {"pairs": len(pairs), "ratios": ratios, "ideal": ideals, "share_of_ideal_gain": shares}
        summary[f"{suite}-m{median}"] = entry
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("| suite, median delay | arm | pairs | samples/s (sync → arm) | arm / sync, each pair | ideal | share of the ideal gain |")
    print("|---|---|---|---|---|---|---|")
    for name, entry in summary.items():
        for arm, a in entry["arms"].items():
            sync = fmean(p["sync"]["samples_per_s"] for p in entry["repeats"].values() if "sync" in p)
            mine = fmean(p[arm]["samples_per_s"] for p in entry["repeats"].values() if arm in p)
            print(f"| {name} | {arm} | {a['pairs']} | {sync:.2f} → {mine:.2f} | {', '.join(f'{r:.2f}' for r in a['ratios'])} "
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
    main(Path(sys.argv[1]))
