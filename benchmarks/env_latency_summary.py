"""Summary of benchmarks/env_latency.sh: per median delay, samples/s of each arm over the steps
after the first (start-up excluded), the paired async/sync ratios (one per repeat), the share of
the ideal gain (ratio − 1) / (ideal − 1), and the per-step environment wait, decode and calls in
flight. The ideal is the sync run's step time over the longer of its training time and its mean
episode's own time (environment time per episode, ``episode/env_time_s`` / episodes, plus the
step's decode time): the speed-up of a rollout that always keeps a batch's worth of episodes in
flight, so that a batch costs an average episode instead of the slowest one, with training hidden. Writes OUT_DIR/summary.json and prints a
Markdown table.

    python benchmarks/env_latency_summary.py OUT_DIR
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from pathlib import Path


def steps(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if r["step"] > 1 and "step_time_s" in r]


def samples_per_s(rows: list[dict]) -> float:
    return sum(r.get("batch_samples", 32) for r in rows) / sum(r["step_time_s"] for r in rows)


def mean(rows: list[dict], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.fmean(values) if values else float("nan")


def main(out: Path) -> dict:
    runs = {}
    for d in sorted(p for p in out.iterdir() if (p / "summary.json").exists()):
        median, arm, repeat = re.fullmatch(r"m([\d.]+)-(sync|async)-r(\d+)", d.name).groups()
        rows = steps(d)
        runs.setdefault(median, {}).setdefault(int(repeat), {})[arm] = {
            "samples_per_s": samples_per_s(rows), "step_time_s": mean(rows, "step_time_s"),
            "gen_time_s": mean(rows, "gen_time_s"), "train_time_s": mean(rows, "train_time_s"),
            "env_wait_s": mean(rows, "episode/env_wait_s"), "decode_s": mean(rows, "episode/decode_s"),
            "calls_in_flight_max": max((r.get("episode/calls_in_flight_max", 0) for r in rows), default=0),
            "episode_env_s": mean(rows, "episode/env_time_s") / mean(rows, "episode/count"),
            "wait_s": mean(rows, "wait_time_s"), "steps": len(rows)}
    summary = {}
    for median, repeats in sorted(runs.items(), key=lambda kv: float(kv[0])):
        pairs = [r for r in repeats.values() if {"sync", "async"} <= set(r)]
        ratios = [p["async"]["samples_per_s"] / p["sync"]["samples_per_s"] for p in pairs]
        ideals = [p["sync"]["step_time_s"] / max(p["sync"]["train_time_s"],
                                                 p["sync"]["episode_env_s"] + p["sync"]["decode_s"]) for p in pairs]
        shares = [(r - 1) / (i - 1) if i > 1 else float("nan") for r, i in zip(ratios, ideals)]
        summary[median] = {"pairs": len(pairs), "ratios": ratios, "ratio_mean": statistics.fmean(ratios) if ratios else None,
                           "ideal": ideals, "share_of_ideal_gain": shares, "runs": repeats}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print("| median delay | pairs | sync samples/s | async samples/s | async/sync (each pair) | ideal | share of ideal gain |")
    print("|---|---|---|---|---|---|---|")
    for median, s in summary.items():
        sync = [p["sync"]["samples_per_s"] for p in s["runs"].values() if "sync" in p]
        asyn = [p["async"]["samples_per_s"] for p in s["runs"].values() if "async" in p]
        print(f"| {median} s | {s['pairs']} | {statistics.fmean(sync):.2f} | {statistics.fmean(asyn):.2f} | "
              f"{', '.join(f'{r:.2f}' for r in s['ratios'])} | {statistics.fmean(s['ideal']):.2f} | "
              f"{', '.join(f'{x:+.0%}' for x in s['share_of_ideal_gain'])} |")
    print()
    print("| median delay | arm | step s | generation s | training s | env wait s (sync: per step) | decode s | calls in flight (max) |")
    print("|---|---|---|---|---|---|---|---|")
    for median, s in summary.items():
        for arm in ("sync", "async"):
            rs = [p[arm] for p in s["runs"].values() if arm in p]
            print(f"| {median} s | {arm} | {statistics.fmean(r['step_time_s'] for r in rs):.2f} | "
                  f"{statistics.fmean(r['gen_time_s'] for r in rs):.2f} | {statistics.fmean(r['train_time_s'] for r in rs):.2f} | "
                  f"{statistics.fmean(r['env_wait_s'] for r in rs):.2f} | {statistics.fmean(r['decode_s'] for r in rs):.2f} | "
                  f"{max(r['calls_in_flight_max'] for r in rs)} |")
    return summary


if __name__ == "__main__":
    main(Path(sys.argv[1]))
