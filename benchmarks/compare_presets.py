"""Run the three A-3PO presets (sync, async-recompute, async-loglinear) with the same seed and
steps, one after the other, and print the runtime ratios the async runtime is judged by.

    python benchmarks/compare_presets.py --steps 60 --seed 0 [--out runs/compare] [key=value ...]

Wall times are ``train_wall_s``: the training loop only (warm start, worker start-up and
evaluations excluded), so the three runs are compared on the same work.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

PRESETS = ("sync", "async-recompute", "async-loglinear")


def run(preset: str, args, extra: list[str]) -> dict:
    root = Path(__file__).resolve().parents[1]
    name = f"{preset}-s{args.seed}"
    summary = Path(args.out) / name / "summary.json"
    if not summary.exists():
        cmd = [sys.executable, "-m", "asyncrl.cli", "train", "--config", str(root / "configs" / f"{preset}.yaml"),
               f"trainer.steps={args.steps}", f"run.seed={args.seed}", f"run.out_dir={args.out}",
               f"run.name={name}", "run.progress=false", "eval.every=0", *extra]
        subprocess.run(cmd, check=True)
    return json.loads(summary.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/compare")
    parser.add_argument("extra", nargs="*", help="dotted.key=value overrides for all three runs")
    args = parser.parse_args()
    s = {p: run(p, args, args.extra) for p in PRESETS}
    t_gen, t_train = s["sync"]["gen_time_per_step_s"], s["sync"]["train_time_per_step_s"]
    ideal = (t_gen + t_train) / max(t_gen, t_train)
    speedup = s["sync"]["train_wall_s"] / s["async-loglinear"]["train_wall_s"]
    report = {
        "sync_gen_time_per_step_s": t_gen, "sync_train_time_per_step_s": t_train,
        "ideal_overlap": ideal, "speedup_vs_sync": speedup, "speedup_fraction_of_ideal": speedup / ideal,
        "speedup_vs_recompute": s["async-recompute"]["train_wall_s"] / s["async-loglinear"]["train_wall_s"],
        "prox_time_ratio": s["async-recompute"]["prox_time_per_step_s"]
        / max(s["async-loglinear"]["prox_time_per_step_s"], 1e-12),
        **{f"{p}_train_wall_s": s[p]["train_wall_s"] for p in PRESETS},
        **{f"{p}_prox_time_per_step_s": s[p]["prox_time_per_step_s"] for p in PRESETS},
        **{f"{p}_final_eval_reward": s[p]["final_eval_reward"] for p in PRESETS},
        **{f"{p}_initial_eval_reward": s[p]["initial_eval_reward"] for p in PRESETS},
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
