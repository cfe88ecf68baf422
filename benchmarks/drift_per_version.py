"""Drift per version: the mean per-token total variation between the trained policy and the
behaviour policy, by exact staleness K, from a committed study.

    python benchmarks/drift_per_version.py benchmarks/results/2026-11-25-atlas-full      # an atlas
    python benchmarks/drift_per_version.py benchmarks/results/2026-11-27-drift-long      # a plan study

``tv`` is logged by every loss on every step: ½ · mean over the step's trained tokens of |ρ − 1|,
ρ = π_θ(token) / π_behav(token), an estimate of the total variation from the sampled tokens. In
simulated mode with lag K every token of a step is K versions old, plus the forward lag of the
step's own minibatch updates (which is what K = 0 shows).

An atlas study: its lag-row cells, one row per K (the median over arms of each arm's mean, the
range over arms, PPO-clip's and A-3PO's own). A plan study (``python -m benchmarks study --plan``): every
arm run in simulated mode, K read from the plan (``async.lag`` of the arm, else of ``common``), one
row per arm (mean over its seeds' steps, and the range of the per-seed means). ``--skip N`` leaves
out each run's first N steps (at lag K the first K + 1 updates train on warm-start samples).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's root: the benchmarks package
from benchmarks.bench.study import load_study  # noqa: E402


def _tvs(run: dict, skip: int) -> list[float]:
    return [float(r["tv"]) for r in run.get("metrics") or []
            if isinstance(r.get("tv"), (int, float)) and int(r.get("step", 0)) > skip]


def drift_by_k(study_dir: Path, skip: int = 0) -> dict[int, dict[str, float]]:
    """{K: {arm: mean tv over its seeds' steps}} of an atlas study's lag-row cells."""
    results = load_study(study_dir)
    values: dict[tuple[int, str], list[float]] = defaultdict(list)
    for run in results.get("runs") or []:
        params = run.get("params") or {}
        if params.get("row") != "lag":
            continue
        values[(int(params["K"]), run["method"])] += _tvs(run, skip)
    table: dict[int, dict[str, float]] = defaultdict(dict)
    for (k, arm), tvs in values.items():
        if tvs:
            table[k][arm] = statistics.fmean(tvs)
    return dict(sorted(table.items()))


def drift_by_arm(study_dir: Path, skip: int = 0) -> list[dict]:
    """One row per simulated-mode arm of a plan study: arm, K, loss, mean tv, per-seed means."""
    results = load_study(study_dir)
    plan = results.get("plan") or {}
    common = plan.get("common") or {}
    per_seed: dict[str, list[float]] = defaultdict(list)
    for run in results.get("runs") or []:
        tvs = _tvs(run, skip)
        if tvs:
            per_seed[(run.get("params") or {}).get("arm", run["method"])].append(statistics.fmean(tvs))
    rows = []
    for arm, overrides in (plan.get("arms") or {}).items():
        spec = {**common, **(overrides or {})}
        if spec.get("run.mode") != "simulated" or arm not in per_seed:
            continue
        means = per_seed[arm]
        rows.append({"arm": arm, "K": int(spec.get("async.lag", 0)),
                     "loss": f"{spec.get('loss.name', '?')} / prox {spec.get('trainer.prox', '?')}",
                     "tv": statistics.fmean(means), "seed_means": means})
    return sorted(rows, key=lambda r: (r["K"], r["arm"]))


def _print_atlas(table: dict[int, dict[str, float]]) -> None:
    print("| K | median over arms | range over arms | PPO-clip | A-3PO (decoupled, log-linear) | arms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for k, arms in table.items():
        vals = list(arms.values())
        ppo, a3po = arms.get("ppo", float("nan")), arms.get("decoupled", float("nan"))
        print(f"| {k} | {statistics.median(vals):.4f} | {min(vals):.4f}-{max(vals):.4f} | {ppo:.4f} | {a3po:.4f} "
              f"| {len(vals)} |")


def _print_plan(rows: list[dict]) -> None:
    print("| arm | K | loss | mean tv | per-seed means (min-max) | seeds |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        lo, hi = min(r["seed_means"]), max(r["seed_means"])
        print(f"| {r['arm']} | {r['K']} | {r['loss']} | {r['tv']:.4f} | {lo:.4f}-{hi:.4f} | {len(r['seed_means'])} |")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study_dir", type=Path, help="a committed study folder (atlas or plan study)")
    parser.add_argument("--skip", type=int, default=0, help="leave out each run's first N steps")
    args = parser.parse_args(argv)
    table = drift_by_k(args.study_dir, args.skip)
    if table:
        _print_atlas(table)
        return 0
    rows = drift_by_arm(args.study_dir, args.skip)
    if not rows:
        print(f"drift_per_version: {args.study_dir} has neither an atlas lag row nor simulated-mode plan arms "
              "with a logged tv", file=sys.stderr)
        return 2
    _print_plan(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
