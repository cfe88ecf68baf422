"""The table of benchmarks/results/<date>-rg/README.md: each run's eval reward before and after, and by
step, from its metrics.jsonl (run before the per-step files are dropped from the commit).
Usage: python benchmarks/rg_summary.py OUT_DIR   (prints the markdown table)"""

import json
import sys
from pathlib import Path


def main(out: Path) -> None:
    print("| run | eval before | eval after | lift (points) | wall s | eval reward by step |")
    print("|---|---|---|---|---|---|")
    for run in sorted(p.parent for p in out.glob("*/summary.json")):
        summary = json.loads((run / "summary.json").read_text())
        evals = [(r["step"], r["eval_reward"]) for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                 if r.get("eval_reward") is not None]
        before, after = evals[0][1], evals[-1][1]
        curve = ", ".join(f"{step}: {value:.3f}" for step, value in evals)
        print(f"| {run.name} | {before:.3f} | {after:.3f} | {100 * (after - before):+.1f} | "
              f"{summary.get('wall_time_s', float('nan')):.0f} | {curve} |")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
