"""The speed table of the suites that report speed (a3po, peer-trl): every speed ratio from paired
runs, with its spread, its paired interval, the share of the ideal gain where the suite defines an
ideal, and each run's load beside its timings. The statistics are benchmarks.bench.repeats'.

A pair is the two arms' runs of one seed and one repeat (``--repeats``; a run without one is repeat
1), so without ``--repeats`` each seed is one pair and every figure carries the protocol's mark.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from . import wording as W
from .load import overload_warning
from .repeats import PROTOCOL_REPEATS, protocol_mark, ratio_stats, share_of_ideal, speed_ratios
from .stats import run_value

# (summary metric, words, whether a larger value is faster)
SPEED_METRICS = (("train_wall_s", "train wall", False), ("samples_per_s", "samples/s", True),
                 ("time_per_step_s", "time per step", False))
Ideal = Callable[[Mapping[str, Any]], "float | None"]  # the baseline run of a pair -> its ideal speed-up


def first_repeats(runs: Sequence[Mapping[str, Any]]) -> list:
    """The runs of repeat 1 (and runs without ``--repeats``): the study as one run per seed, which is
    what the reward statistics take; repeats re-run the same seed and are evidence about timing only."""
    return [run for run in runs if run.get("repeat", 1) == 1]


def _key(run: Mapping[str, Any]) -> tuple[int, int]:
    return int(run.get("seed") or 0), int(run.get("repeat") or 1)


def paired_runs(runs: Sequence[Mapping[str, Any]], arm: str, baseline: str) -> list[tuple[dict, dict]]:
    """(arm run, baseline run) for every (seed, repeat) both arms finished, in that order."""
    by = {method: {_key(r): r for r in runs if r.get("method") == method} for method in (arm, baseline)}
    return [(by[arm][k], by[baseline][k]) for k in sorted(set(by[arm]) & set(by[baseline]))]


def fewest_repeats(pairs: Sequence[tuple[Mapping, Mapping]]) -> int:
    """The fewest pairs any seed has: the repeats a figure rests on (more seeds are not more repeats)."""
    per_seed: dict[int, int] = {}
    for arm_run, _ in pairs:
        per_seed[_key(arm_run)[0]] = per_seed.get(_key(arm_run)[0], 0) + 1
    return min(per_seed.values(), default=0)


def compare(pairs: Sequence[tuple[Mapping, Mapping]], ideal: Ideal | None = None) -> dict[str, Any]:
    """Per speed metric: ratio_stats of arm ÷ baseline speed over the pairs, the repeats they rest
    on, and with ``ideal`` the mean ideal of the pairs' baselines and the share of its gain that the
    geometric mean (and the interval's ends) realise."""
    repeats = fewest_repeats(pairs)
    ideals = [i for i in (ideal(base) for _, base in pairs) if i is not None] if ideal else []
    ideal_value = sum(ideals) / len(ideals) if ideals else None
    out = {}
    for metric, _, higher in SPEED_METRICS:
        stats = ratio_stats(speed_ratios([run_value(a, metric) for a, _ in pairs],
                                         [run_value(b, metric) for _, b in pairs], higher))
        stats.update(repeats=repeats, below_protocol=repeats < PROTOCOL_REPEATS, ideal=ideal_value,
                     share_of_ideal=share_of_ideal(stats["geomean"], ideal_value),
                     share_ci=[share_of_ideal(stats[k], ideal_value) for k in ("ci_low", "ci_high")])
        out[metric] = stats
    return out


def speed_section(runs: Sequence[Mapping[str, Any]], comparisons: Sequence[tuple[str, str]],
                  ideal: Ideal | None, ideal_words: str) -> tuple[dict, str]:
    """(summary entry "speed", Markdown) for ``comparisons`` [(arm, baseline)] over ``runs`` (all
    repeats). ``ideal``: the suite's ideal speed-up from a pair's baseline run, applied to the
    comparisons against ``comparisons``' first baseline; ``ideal_words`` says what it is, or why
    the suite has none."""
    present = {r.get("method") for r in runs}
    found = [(a, b) for a, b in comparisons if a in present and b in present]
    if not found:
        return {}, ""
    ideal_base = comparisons[0][1]
    table = {f"{a} vs {b}": compare(paired_runs(runs, a, b), ideal if b == ideal_base else None) for a, b in found}
    for (a, b), comp in zip(found, table.values()):  # why a share is missing: none defined, or not for this baseline
        for stats in comp.values():
            stats["ideal_note"] = None if stats["ideal"] is not None else \
                ("none defined" if ideal is None else f"ideal is against {ideal_base}")
    repeats = min(stats["repeats"] for comp in table.values() for stats in comp.values())
    warnings = [w for r in runs if (w := overload_warning(str(r.get("cell")), r.get("load"))) is not None]
    entry = {"protocol_repeats": PROTOCOL_REPEATS, "repeats": repeats, "ideal": ideal_words,
             "comparisons": table, "overloaded_runs": [w.split(":", 1)[0].strip(" !") for w in warnings]}
    return entry, _markdown(table, runs, ideal_words, warnings)


def paired_headline(target: dict, speed: Mapping[str, Any], keys: Mapping[str, tuple[str, str]]) -> None:
    """Under ``--repeats``: set each ``keys`` entry of ``target`` ({key: (comparison, metric)}) to the
    speed table's geometric mean over every paired repeat, where it has one; the ratio of means that
    the builders compute reads repeat 1 only (the reward statistics' runs)."""
    for key, (comparison, metric) in keys.items():
        geomean = (((speed.get("comparisons") or {}).get(comparison) or {}).get(metric) or {}).get("geomean")
        if geomean is not None and math.isfinite(geomean):
            target[key] = geomean


def _interval(stats: Mapping[str, Any]) -> str:
    low, high = stats["ci_low"], stats["ci_high"]
    return "n/a (one pair)" if not math.isfinite(low) else f"[{W.number(low)}, {W.number(high)}]"


def _share(stats: Mapping[str, Any]) -> str:
    share = stats["share_of_ideal"]
    if share is None:
        return stats.get("ideal_note") or "n/a"
    ends = [s for s in stats["share_ci"] if s is not None]
    bracket = f" [{ends[0]:+.0%}, {ends[1]:+.0%}]" if len(ends) == 2 else ""
    return f"{share:+.0%}{bracket} of {W.ratio(stats['ideal'])}".replace("-", "−")


def _markdown(table: Mapping[str, Mapping[str, Any]], runs: Sequence[Mapping[str, Any]], ideal_words: str,
              warnings: Sequence[str]) -> str:
    rows = []
    for comparison, by_metric in table.items():
        for words, s in _distinct(by_metric):
            mark = protocol_mark(s["repeats"])
            rows.append([words, comparison.replace(" vs ", " ÷ "), str(s["n"]),
                         ", ".join(W.number(r) for r in s["ratios"]),
                         W.ratio(s["geomean"]) + (f" {mark}" if mark else ""),
                         f"{W.number(s['min'])}–{W.number(s['max'])}", _interval(s), _share(s)])
    text = W.md_table(["Speed", "Arm ÷ baseline", "Pairs", "Each pair", "Geometric mean", "Min–max",
                       "95 % paired interval", "Share of the ideal gain"], rows)
    text += (f"\nSpeed: how many times faster the arm ran than the baseline (rates arm ÷ baseline, times "
             f"baseline ÷ arm), per pair of runs with the same seed and repeat (run in interleaved order "
             f"with --repeats); the interval is the t interval of the log ratios over the pairs (n − 1 df). "
             f"The protocol asks for {PROTOCOL_REPEATS} repeats or more (docs/speed-protocol.md). Share of "
             f"the ideal gain: (ratio − 1) / (ideal − 1) at the geometric mean [and at the interval's ends]; "
             f"{ideal_words}.\n\n")
    return text + _load_table(runs, warnings)


def _distinct(by_metric: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, Mapping[str, Any]]]:
    """(words, stats) per metric with pairs, metrics whose ratios agree merged into one row: an
    asyncrl run's samples/s and time per step are its train wall rescaled, so their ratios coincide."""
    rows: list[tuple[list[str], Mapping[str, Any]]] = []
    for metric, words, _ in SPEED_METRICS:
        s = by_metric[metric]
        if not s["n"]:
            continue
        same = next((row for row in rows if len(row[1]["ratios"]) == len(s["ratios"]) and all(
            math.isclose(x, y, rel_tol=1e-6) for x, y in zip(row[1]["ratios"], s["ratios"]))), None)
        if same is None:
            rows.append(([words], s))
        else:
            same[0].append(words)
    return [(", ".join(words), s) for words, s in rows]


def _load(run: Mapping[str, Any]) -> str:
    load = run.get("load") or {}
    ends = [f"{load[w][0]:.2f}" if load.get(w) else "?" for w in ("start", "end")]
    return "not recorded" if not load else f"{ends[0]} → {ends[1]} ({load.get('cores', '?')} cores)"


def _load_table(runs: Sequence[Mapping[str, Any]], warnings: Sequence[str]) -> str:
    rows = [[str(r.get("cell")), str(r.get("repeat", 1)), *(W.number(run_value(r, m)) for m, _, _ in SPEED_METRICS),
             _load(r)] for r in runs]
    text = W.md_table(["Run", "Repeat", "Train wall (s)", "Samples/s", "Time/step (s)",
                       "1-min load, start → end"], rows)
    text += "\nEach run in run order, with the machine's 1-minute load average when it started and ended.\n"
    if warnings:
        text += "\nUnder load (its timings are slower than the machine's):\n\n" + \
            "".join(f"- {w.strip().lstrip('! ')}\n" for w in warnings)
    return text
