"""One run as a process: ``python -m benchmarks.control out_dir=DIR key=value ...``.

Writes ``DIR/metrics.jsonl`` (one line per iteration) and, last and atomically, ``DIR/summary.json``
(config, final score, wall time): a run directory with summary.json is a finished run. Bad keys or
values, or gymnasium / MuJoCo not installed (the ``control`` extra), exit 2 with one line.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.control.config import ControlConfig, make_config, parse_overrides
from benchmarks.control.extra import require_control_extra
from benchmarks.control.train import train

FINAL_FRACTION = 0.1  # the final score averages the episodes of the last 10 % of iterations


def final_score(history: list[dict]) -> float:
    """Mean raw episodic return over the last FINAL_FRACTION of iterations (episode-weighted)."""
    tail = history[-max(1, math.ceil(FINAL_FRACTION * len(history))):]
    weighted = [(h["episodic_return"], h["episodes"]) for h in tail if h["episodes"]]
    if not weighted:
        return math.nan
    values, counts = zip(*weighted)
    return float(np.average(values, weights=counts))


def _jsonable(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def run_to_dir(cfg: ControlConfig, run_dir: Path) -> dict:
    """Train and write metrics.jsonl then summary.json into run_dir; returns the summary."""
    run_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with open(run_dir / "metrics.jsonl", "w") as log:
        def record(metrics: dict) -> None:
            log.write(json.dumps({k: _jsonable(v) for k, v in metrics.items()}) + "\n")
            log.flush()

        result = train(cfg, record)
    wall = time.perf_counter() - started
    summary = {"config": dataclasses.asdict(cfg), "final_score": _jsonable(final_score(result.history)),
               "env_steps": cfg.iterations * cfg.batch_size, "train_wall_s": wall,
               "env_steps_per_s": cfg.iterations * cfg.batch_size / wall}
    tmp = run_dir / "summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1))
    os.replace(tmp, run_dir / "summary.json")
    return summary


def main(argv: list[str]) -> int:
    try:
        overrides = parse_overrides([a for a in argv if not a.startswith("out_dir=")])
        out = [a.partition("=")[2] for a in argv if a.startswith("out_dir=")]
        if not out:
            raise ValueError("out_dir: required (out_dir=DIR)")
        cfg = make_config(overrides.pop("env_id", "CartPole-v1"), **overrides)
        require_control_extra([cfg.env_id], cfg.env_id)
    except ValueError as err:
        print(f"benchmarks.control: {err}", file=sys.stderr)
        return 2
    summary = run_to_dir(cfg, Path(out[-1]))
    print(json.dumps({k: summary[k] for k in ("final_score", "env_steps", "train_wall_s", "env_steps_per_s")}))
    return 0
