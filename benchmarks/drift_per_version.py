"""Drift per version: the mean per-token total variation between the trained policy and the
behaviour policy, by exact staleness K, from a committed atlas study (its lag row).

    python benchmarks/drift_per_version.py benchmarks/results/2026-11-25-atlas-full

``tv`` is logged by every loss on every step: ½ · mean over the step's trained tokens of |ρ − 1|,
ρ = π_θ(token) / π_behav(token), an estimate of the total variation from the sampled tokens. In the
atlas's simulated mode with lag K every token of a step is K versions old, plus the forward lag of
the step's own minibatch updates (which is what K = 0 shows). Prints a Markdown table: per K, the
median over arms of each arm's mean, the range over arms, and PPO-clip's and A-3PO's own values.
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

from asyncrl.bench.study import load_study


def drift_by_k(study_dir: Path) -> dict[int, dict[str, float]]:
    """{K: {arm: mean tv over its seeds' steps}} of the study's lag-row cells."""
    results = load_study(study_dir)
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for run in results.get("runs") or []:
        params = run.get("params") or {}
        if params.get("row") != "lag":
            continue
        values[(int(params["K"]), run["method"])] += [float(r["tv"]) for r in run.get("metrics") or []
                                                      if isinstance(r.get("tv"), (int, float))]
    table: dict[int, dict[str, float]] = defaultdict(dict)
    for (k, arm), tvs in values.items():
        if tvs:
            table[k][arm] = statistics.fmean(tvs)
    return dict(sorted(table.items()))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: drift_per_version.py STUDY_DIR (an atlas study folder)", file=sys.stderr)
        return 2
    table = drift_by_k(Path(argv[0]))
    print("| K | median over arms | range over arms | PPO-clip | A-3PO (decoupled, log-linear) | arms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, arms in table.items():
        vals = list(arms.values())
        ppo, a3po = arms.get("ppo", float("nan")), arms.get("decoupled", float("nan"))
        print(f"| {k} | {statistics.median(vals):.4f} | {min(vals):.4f}-{max(vals):.4f} | {ppo:.4f} | {a3po:.4f} "
              f"| {len(vals)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
