"""The table of the agents' learning runs (benchmarks/agents_learning.sh): one row per run from its
summary.json and metrics.jsonl, written to OUT_DIR/README.md after the notes already there (the
part above the marker line is kept: the runs' machine, the command, what was noticed).

A long run's metrics.jsonl (about 3 KB a step) can be cut down to ``steps.jsonl``, the columns the
table reads (``--compact RUN ...``), so that it is committed without its whole per-step record; the
table is rendered from ``steps.jsonl`` where metrics.jsonl is not there.

Usage: python benchmarks/agents_summary.py OUT_DIR [--compact RUN_NAME ...]
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import yaml

MARKER = "<!-- table: written by benchmarks/agents_summary.py -->"


COLUMNS = ("step", "eval_reward", "episode/turns_mean", "staleness_seq_max")


def step_records(run: Path) -> list[dict]:
    """The table's columns of every step: from metrics.jsonl, else steps.jsonl."""
    metrics = run / "metrics.jsonl"
    source = metrics if metrics.exists() else run / "steps.jsonl"
    return [{k: r[k] for k in COLUMNS if k in r} for r in map(json.loads, source.read_text().splitlines())]


def compact(run: Path) -> None:
    """Write ``run``'s steps.jsonl from its metrics.jsonl (which can then be left out of the commit)."""
    (run / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in step_records(run)))


def lift_z(start: float, end: float, n: int, low: float = 0.0, high: float = 1.0) -> float:
    """The lift over its standard error's upper bound: a reward in [low, high] with mean m has
    variance at most (high - m)(m - low) (Bhatia-Davis), and each score is the mean over ``n`` eval
    problems (a problem's samples averaged first, so its mean is one observation in [low, high]).
    GEM's games reward a malformed action with -0.1, so their episodes lie in [-0.1, 1]."""
    se = math.sqrt(((high - start) * (start - low) + (high - end) * (end - low)) / n)
    return (end - start) / se if se > 0 else math.copysign(math.inf, end - start) if end != start else 0.0


def eval_problems(run: Path) -> int:
    return int(yaml.safe_load((run / "config.yaml").read_text())["eval"]["n_problems"])


GEM_LOW = -0.1  # GEM's LanguageGameReward.format_error_reward, its games' lowest reward


def reward_bounds(run: Path) -> tuple[float, float]:
    """The range an eval problem's reward can take: [-0.1, 1] for a GEM game, else [0, 1]."""
    config = yaml.safe_load((run / "config.yaml").read_text())
    return (GEM_LOW, 1.0) if str(config.get("env", {}).get("name") or "").startswith("gem:") else (0.0, 1.0)


def row(run: Path) -> str:
    summary = json.loads((run / "summary.json").read_text())
    records = step_records(run)
    evals = [(r["step"], r["eval_reward"]) for r in records if isinstance(r.get("eval_reward"), float)]
    steps = [r for r in records if r["step"] > 0]
    turns = sum(r.get("episode/turns_mean", 0) for r in steps) / max(1, sum("episode/turns_mean" in r for r in steps))
    stale = max((r.get("staleness_seq_max", 0) for r in steps), default=0)
    start, end = summary["initial_eval_reward"], summary["final_eval_reward"]
    history = ", ".join(f"{s}: {v:.3f}" for s, v in evals)
    z = lift_z(start, end, eval_problems(run), *reward_bounds(run))
    return (f"| {run.name} | {start:.3f} | {end:.3f} | {100 * (end - start):+.1f} | {z:+.2f} | {turns:.2f} | {stale:.0f} | "
            f"{summary['wall_time_s']:.0f} | {history} |")


def main(out: Path) -> None:
    runs = sorted(p.parent for p in out.glob("*/summary.json"))
    lines = [MARKER, "",
             "| run | eval before | eval after | lift (points) | lift ÷ SE bound | turns per episode "
             "| max oldest-token staleness | wall s | eval reward by step |",
             "|---|---|---|---|---|---|---|---|---|", *map(row, runs), ""]
    readme = out / "README.md"
    head = readme.read_text().split(MARKER)[0] if readme.exists() else ""
    readme.write_text(head + "\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="the folder of the runs (agents_learning.sh's OUT_DIR)")
    parser.add_argument("--compact", nargs="+", default=[], metavar="RUN_NAME",
                        help="write these runs' steps.jsonl from their metrics.jsonl first")
    args = parser.parse_args()
    if not args.out_dir.is_dir():
        parser.error(f"{args.out_dir}: no such folder")
    for name in args.compact:
        compact(args.out_dir / name)
    main(args.out_dir)
