"""Numbers and sentences for bench reports: what a reader sees instead of raw keys and floats.

Every number is fixed-point with about three significant digits (never ``8.6e-05``); a CI
half-width uses the decimals of the mean it qualifies (``2.64 ± 0.09``), and a seconds value
below one second is shown in milliseconds. Each suite's headline is one sentence in words with
units, and a verdict line says what the numbers mean.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .stats import as_float

METHOD_NAMES = {"sync": "sync GRPO", "async-recompute": "async, recomputed prox",
                "async-loglinear": "A-3PO (async, log-linear prox)", "trl-grpo": "TRL GRPO",
                "asyncrl-sync": "asyncrl sync", "asyncrl-async-loglinear": "asyncrl A-3PO (async)"}


def decimals(x: float, sig: int = 3) -> int:
    """Decimal places that show ``x`` with ``sig`` significant digits (0 for large numbers, at most 6)."""
    if not math.isfinite(x) or x == 0:
        return sig - 1
    return min(6, max(0, sig - 1 - math.floor(math.log10(abs(x)))))


def number(x: Any, sig: int = 3) -> str:
    """``x`` fixed-point with ``sig`` significant digits; "n/a" when missing."""
    x = as_float(x)
    return "n/a" if not math.isfinite(x) else f"{x:,.{decimals(x, sig)}f}"


def mean_pm(mean: float, half: float, sig: int = 3) -> str:
    """"mean ± half" with the half-width at the mean's decimals."""
    if not math.isfinite(mean):
        return "n/a"
    d = decimals(mean, sig)
    return f"{mean:,.{d}f}" if not math.isfinite(half) else f"{mean:,.{d}f} ± {half:,.{d}f}"


def seconds(x: Any) -> str:
    """Seconds in words: "2.64 ms", "13.2 s", "n/a"."""
    x = as_float(x)
    if not math.isfinite(x):
        return "n/a"
    return f"{number(x * 1e3)} ms" if abs(x) < 1 else f"{number(x)} s"


def ratio(x: Any) -> str:
    x = as_float(x)
    return "n/a" if not math.isfinite(x) else f"{number(x)}×"


def seeds(n: int) -> str:
    """"1 seed", "3 seeds"."""
    return f"{n} seed{'' if n == 1 else 's'}"


def points(x: Any) -> str:
    """A reward difference already in points (×100)."""
    x = as_float(x)
    return "n/a" if not math.isfinite(x) else f"{x:+.1f} points"


# summary.json headline entries: key → (words, formatter); keys not listed are not shown
HEADLINE_LABELS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "speedup_vs_sync": ("speed-up of A-3PO over sync (training wall time)", ratio),
    "speedup_vs_recompute": ("speed-up of A-3PO over recomputed prox", ratio),
    "prox_time_ratio": ("proximal-policy time, recompute ÷ log-linear", ratio),
    "ideal_overlap": ("ideal speed-up from perfect overlap of generation and training", ratio),
    "speedup_fraction_of_ideal": ("share of the ideal speed-up reached", lambda x: f"{number(as_float(x) * 100)}%"),
    "eval_gap_sync_minus_loglinear": ("eval reward, sync minus A-3PO", points),
    "weight_sync_s_per_step": ("weight sync per step (publish + pull)", seconds),
    "samples_per_s_ratio_vs_trl": ("samples/s of asyncrl A-3PO ÷ TRL GRPO", ratio),
    "samples_per_s_ratio_sync_vs_trl": ("samples/s of asyncrl sync ÷ TRL GRPO", ratio),
    "eval_reward_delta_vs_trl": ("eval reward, asyncrl A-3PO minus TRL GRPO", points),
    "collapse_margin": ("collapse margin (eval reward drop)", number),
}


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-style Markdown table, ending in a newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


# Verdicts of a two-arm comparison (stats.verdict); nothing in a report says more than its test.
VERDICT_MARKS = {"differs": "*", "equivalent": "≈"}
TEST_CAPTION = ("Each comparison: difference of the means in points with its 95 % Welch interval; the Welch "
                "p-value Holm-adjusted over every comparison in the same table; the TOST equivalence p within "
                "the stated margin; the minimum detectable difference (MDE: the true gap the Holm-adjusted test "
                "detects with 80 % power, i.e. at two-sided 5 % ÷ the table's number of comparisons, from the "
                "pooled SD; exact Welch power, not the normal shortcut). Verdict: differs (Holm p < 0.05), equivalent within the margin (TOST p < "
                "0.05), else undecided.")


def verdict_words(comp: Mapping[str, Any], scale: float = 100.0) -> str:
    """"differs", "equivalent within 3 points", "undecided", or ONE_SEED when an arm has one seed
    (``scale`` turns the stored margin into points: 100 for reward units, 1 when already in points)."""
    if min(int(comp.get("n_a") or 0), int(comp.get("n_b") or 0)) < 2:
        return ONE_SEED
    if comp.get("verdict") == "equivalent":
        return f"equivalent within {scale * as_float(comp.get('margin')):g} points"
    return str(comp.get("verdict") or "undecided")


def p_text(x: Any) -> str:
    """A p-value as the reports print it: three decimals, "< 0.001" below that, "n/a" when not finite."""
    x = as_float(x)
    return "n/a" if not math.isfinite(x) else ("< 0.001" if x < 0.001 else f"{x:.3f}")


def gap_ci(comp: Mapping[str, Any], scale: float = 100.0) -> str:
    """"−20.8 [−27.2, −11.8]": the difference and its Welch interval, in points."""
    mean, low, high = (scale * as_float(comp.get(k)) for k in ("mean", "ci_low", "ci_high"))
    return "n/a" if not math.isfinite(mean) else f"{mean:+.1f} [{low:+.1f}, {high:+.1f}]".replace("-", "−")


def comparison(comp: Mapping[str, Any], scale: float = 100.0) -> str:
    """"−20.8 [−27.2, −11.8] points (Holm p = 0.040, MDE 11.0): differs"."""
    return (f"{gap_ci(comp, scale)} points (Holm p = {p_text(comp.get('p_holm'))}, MDE "
            f"{scale * as_float(comp.get('mde')):.1f}): {verdict_words(comp, scale)}")


def comparison_table(rows: Sequence[tuple[str, Mapping[str, Any]]], scale: float = 100.0) -> str:
    """Markdown table of (label, compare_arms dict with its verdict) rows, with TEST_CAPTION under it."""
    body = [[label, gap_ci(c, scale), p_text(c.get("p_holm")), p_text(c.get("p_tost")),
             f"{scale * as_float(c.get('mde')):.1f}".replace("nan", "n/a"), verdict_words(c, scale)] for label, c in rows]
    margin = next((scale * as_float(c.get("margin")) for _, c in rows), math.nan)
    return md_table(["Comparison", "Gap, points [95 % Welch CI]", "p (Holm)", f"TOST p (±{margin:g})",
                     "MDE (points)", "Verdict"], body) + "\n" + TEST_CAPTION + "\n"


# the headline numbers that are speed figures: they carry the speed protocol's mark (speed_mark)
SPEED_KEYS = frozenset({"speedup_vs_sync", "speedup_vs_recompute", "speedup_fraction_of_ideal",
                        "samples_per_s_ratio_vs_trl", "samples_per_s_ratio_sync_vs_trl"})


def headline_items(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(words, formatted value) for the summary's headline numbers, in table order."""
    return [(label, fmt(summary[key]) + (speed_mark(summary) if key in SPEED_KEYS else ""))
            for key, (label, fmt) in HEADLINE_LABELS.items()
            if key in summary and isinstance(summary[key], (int, float)) and not isinstance(summary[key], bool)]


def _stat(methods: Mapping[str, Any], method: str, metric: str) -> tuple[float, float, int]:
    """(mean, CI half-width, seeds) of a method's metric; NaNs when missing."""
    s = methods.get(method, {}).get(metric, {})
    mean, low, high = (as_float(s.get(k)) for k in ("mean", "ci_low", "ci_high"))
    return mean, (high - low) / 2, int(s.get("n") or 0)


def _reward_phrase(methods, method: str) -> str:
    """"eval reward 0.552 (± 0.020, 3 seeds)": the mean with its CI half-width."""
    mean, half, n = _stat(methods, method, "final_eval_reward")
    if not n:
        return "no final eval reward"
    d = decimals(mean)
    spread = f"± {half:.{d}f}, " if math.isfinite(half) else ""
    return f"eval reward {mean:.{d}f} ({spread}{seeds(n)})"


def _overlap(methods, a: str, b: str, metric: str) -> bool:
    """Whether the two methods' CIs of ``metric`` overlap (within seed noise)."""
    sa, sb = methods.get(a, {}).get(metric, {}), methods.get(b, {}).get(metric, {})
    lo_a, hi_a, lo_b, hi_b = (as_float(s.get(k)) for s in (sa, sb) for k in ("ci_low", "ci_high"))
    return max(lo_a, lo_b) <= min(hi_a, hi_b)


ONE_SEED = "one seed: no test"  # a single seed has no spread: nothing is within or outside it


def _compare(methods, a: str, b: str, b_name: str) -> tuple[str, str]:
    """("1.3 points below sync", "within seed noise" | "outside seed noise" | ONE_SEED) for final
    eval reward; with fewer than two seeds on either side nothing is claimed about noise."""
    gap = (as_float(methods.get(a, {}).get("final_eval_reward", {}).get("mean"))
           - as_float(methods.get(b, {}).get("final_eval_reward", {}).get("mean"))) * 100
    if not math.isfinite(gap):
        return f"no eval comparison with {b_name}", ""
    side = "above" if gap > 0 else "below"
    if min(_stat(methods, m, "final_eval_reward")[2] for m in (a, b)) < 2:
        noise = ONE_SEED
    else:
        noise = "within seed noise" if _overlap(methods, a, b, "final_eval_reward") else "outside seed noise"
    return (f"{abs(gap):.1f} points {side} {b_name}" if round(abs(gap), 1) else f"level with {b_name}"), noise


def partial_line(n_runs: int, cells_total: int | None) -> list[str]:
    """A report on some of a suite's cells says so first (empty when every cell finished)."""
    if cells_total is None or n_runs >= cells_total:
        return []
    return [f"Partial: {n_runs} of {cells_total} cells have finished; rerun the same command (without "
            f"--report-only) to run the rest."]


def parts_line(parts: list[Mapping[str, Any]] | None) -> list[str]:
    """A study joined from parts run apart (``--merge``) names each part: where and when it ran."""
    if not parts:
        return []

    def one(part: Mapping[str, Any]) -> str:
        host = part.get("host") or {}
        commit = (host.get("commit") or "unknown")[:7] + (" (dirty)" if host.get("dirty") else "")
        return (f"{part.get('folder')} ({part.get('runs')} runs, {part.get('created_at') or 'undated'}, "
                f"commit {commit}, {host.get('cpu_model') or 'processor unknown'})")

    return [f"Merged from {len(parts)} parts run apart (--merge): " + "; ".join(one(p) for p in parts) + "."]


def _gap_words(gap: Mapping[str, Any] | None, name: str, one_seed: bool = False) -> str:
    """"4.0 points below async recompute [−6.1, −1.9] (Holm p = 0.030, MDE 5.2: differs)" (the bracket:
    95 % Welch interval of the gap; with ``one_seed`` on either arm, ONE_SEED instead)."""
    if not gap:
        return f"no comparison with {name}"
    mean, low, high = (as_float(gap.get(k)) for k in ("mean", "ci_low", "ci_high"))
    side = "above" if mean > 0 else "below"
    bracket = f"({ONE_SEED})" if one_seed else f"[{low:+.1f}, {high:+.1f}]"
    test = (f" (Holm p = {p_text(gap.get('p_holm'))}, MDE {as_float(gap.get('mde')):.1f}: {verdict_words(gap, 1.0)})"
            if "verdict" in gap and not one_seed else "")
    return f"{abs(mean):.1f} points {side} {name} {bracket}".replace("-", "−") + test


def _below(gap: Mapping[str, Any] | None) -> bool:
    """The gap is negative and its test says it differs (a gap without a verdict was never tested)."""
    return bool(gap) and gap.get("verdict") == "differs" and as_float(gap.get("mean")) < 0


def _one_seed(methods: Mapping[str, Any] | None, *names: str) -> bool:
    """Some of the methods ``names`` has fewer than two seeds (unknown when ``methods`` is None)."""
    return methods is not None and min(_stat(methods, m, "final_eval_reward")[2] for m in names) < 2


def speed_mark(summary: Mapping[str, Any]) -> str:
    """" (N repeat(s): below the 5-repeat protocol)" after a speed figure of a summary whose speed
    table (benchmarks.bench.speed_report) rests on too few repeats; "" otherwise."""
    from .repeats import protocol_mark

    repeats = (summary.get("speed") or {}).get("repeats")
    mark = protocol_mark(int(repeats)) if isinstance(repeats, int) else ""
    return f" {mark}" if mark else ""


def paired_speed(summary: Mapping[str, Any], comparison: str, metric: str, fallback: Any) -> tuple[float, str]:
    """(speed ratio, note) for a headline: the geometric mean over the paired runs of the speed
    table with " (speed ratio 1.05×, 95 % paired interval [0.83, 1.32] over 5 pairs)" and the
    protocol's mark; ``fallback`` (a ratio of means) and "" where the summary has no such entry."""
    stats = ((summary.get("speed") or {}).get("comparisons") or {}).get(comparison, {}).get(metric) or {}
    geomean = as_float(stats.get("geomean"))
    if not math.isfinite(geomean):
        return as_float(fallback), ""
    low, high = as_float(stats.get("ci_low")), as_float(stats.get("ci_high"))
    n = int(stats.get("n") or 0)
    spread = (f"95 % paired interval [{number(low)}, {number(high)}] over {n} pairs" if math.isfinite(low)
              else "one pair, no interval")
    mark = speed_mark(summary)
    return geomean, f" (speed ratio {ratio(geomean)}, {spread}{'; ' + mark[2:-1] if mark else ''})"


def headline_a3po_by_k(by_k: Mapping[str, Mapping[str, Any]], methods: Mapping[str, Any] | None = None,
                       mark: str = "") -> list[str]:
    """One sentence per look-ahead K (``bench a3po --ks``), then a verdict on A-3PO against recompute;
    ``methods`` (async-<prox>-k<K>, sync) gives the seed counts: one seed claims nothing; ``mark``
    follows the speed figures (speed_mark)."""
    lines, behind, untested = [], [], False
    for k, row in sorted(by_k.items(), key=lambda kv: int(kv[0])):
        rec_gap = row.get("eval_gap_loglinear_minus_recompute")
        one_rec = _one_seed(methods, f"async-loglinear-k{k}", f"async-recompute-k{k}")
        one_sync = _one_seed(methods, f"async-loglinear-k{k}", "sync")
        untested = untested or (bool(rec_gap) and one_rec)
        if not one_rec and _below(rec_gap):
            behind.append(k)
        err = (f"; its proximal log-probs are off the exact ones by "
               f"{number(row.get('prox_abs_err_mean_stale_steps', row.get('prox_abs_err_mean')))} per token on "
               f"average over the steps with stale tokens, {number(row.get('prox_abs_err_at_max_staleness'))} at staleness "
               f"{row.get('max_measured_staleness')}" if row.get("max_measured_staleness") is not None else "")
        lines.append(f"At look-ahead W = K = {k} (realized staleness {number(row.get('realized_staleness'))}): "
                     f"A-3PO ends {_gap_words(rec_gap, 'async recompute', one_rec)} and "
                     f"{_gap_words(row.get('eval_gap_loglinear_minus_sync'), 'sync', one_sync)}, training "
                     f"{ratio(row.get('speedup_vs_recompute'))} as fast as recompute and "
                     f"{ratio(row.get('speedup_vs_sync'))} as fast as sync{mark}{err}.")
    verdict = (f"Verdict: A-3PO ends below recompute (differs: Welch, Holm p < 0.05) at K = {', '.join(behind)}."
               if behind else "Verdict: no K where A-3PO's difference from recompute passes the test (Welch, "
               "Holm p < 0.05); see each K's verdict.")
    if untested:
        verdict = f"Verdict: none ({ONE_SEED}; run more seeds to compare A-3PO with recompute)."
    return [*lines, verdict]


A3PO_BASELINES = (("sync", "sync", "speedup_vs_sync"), ("async-recompute", "recompute", "speedup_vs_recompute"))
"""(method, its name in a headline, its summary speed-up key): the a3po headline's baseline, the first present."""


def headline_a3po(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    if summary.get("by_k"):
        return headline_a3po_by_k(summary["by_k"], methods, speed_mark(summary))
    ll = "async-loglinear"
    # A-3PO against sync where sync ran; a suite of the async arms alone compares it with recompute
    base, name, key = next((b for b in A3PO_BASELINES if b[0] in methods), (None, "", ""))
    if ll not in methods or base is None:
        return ["A-3PO, or both sync and recompute, is missing from these runs: no comparison."]
    gap, noise = _compare(methods, ll, base, name)
    speed, note = paired_speed(summary, f"{ll} vs {base}", "train_wall_s", summary.get(key))
    time = (f", in {1 / speed:.2f}× its training wall time{speed_mark(summary)}"
            if math.isfinite(speed) and speed > 0 else "")
    first = f"A-3PO reaches {_reward_phrase(methods, ll)}, {gap}{time}."
    if not math.isfinite(speed):
        return [first, "Verdict: no wall-time comparison (a method lacks train_wall_s)."]
    pace = f"{speed:.2f}× faster than" if speed >= 1 else f"{1 / speed:.2f}× slower than"
    quality = "its eval reward within seed noise" if noise == "within seed noise" else f"eval reward {gap} ({noise})"
    return [first, f"Verdict: A-3PO trains {pace} {name}{note}, with {quality}."]


def headline_peer_trl(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    ll, trl = "asyncrl-async-loglinear", "trl-grpo"
    if ll not in methods or trl not in methods:
        return ["asyncrl A-3PO or TRL GRPO is missing from these runs: no comparison."]
    sps = {m: _stat(methods, m, "samples_per_s")[0] for m in (ll, trl)}
    gap, noise = _compare(methods, ll, trl, "TRL GRPO")
    speed, note = paired_speed(summary, f"{ll} vs {trl}", "samples_per_s", summary.get("samples_per_s_ratio_vs_trl"))
    mark = speed_mark(summary)  # " (N repeats: ...)", inside the ratio's own brackets as "; N repeats: ..."
    first = (f"asyncrl A-3PO trains at {number(sps[ll])} samples/s against TRL GRPO's {number(sps[trl])} "
             f"({ratio(speed)}{'; ' + mark[2:-1] if mark else ''}) and reaches {_reward_phrase(methods, ll)}, {gap}.")
    verdict = "faster than" if speed > 1 else "not faster than"
    return [first, f"Verdict: asyncrl is {verdict} TRL here{note}, with eval reward {gap}"
                   f"{f' ({noise})' if noise else ''}."]


def headline_atlas(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    """Sync's gain, which losses differ from sync (below it) or are equivalent to it at the largest K,
    which collapse, and how far each loss's mean stays within ``near_sync`` of sync."""
    lag = (summary.get("rows") or {}).get("lag")
    if not lag or not lag.get("grid"):
        return ["No cell of the lag row finished."]
    grid, ks = lag["grid"], lag["cols"]
    lines = []
    sync = grid.get("ppo", {}).get("0")
    if sync:
        start, end = as_float(sync["initial_eval_reward"]["mean"]), as_float(sync["final_eval_reward"]["mean"])
        acc = as_float(sync["final_eval_answer_acc"]["mean"])
        lines.append(f"Sync (ppo at K = 0, {seeds(sync['n'])}) goes from {number(start)} to {number(end)} eval reward "
                     f"({points(100 * (end - start))})" + (f"; answer accuracy ends at {number(acc)}." if
                                                           math.isfinite(acc) else "."))
    k = ks[-1]
    below = [(m, row[str(k)]) for m, row in grid.items() if str(k) in row and row[str(k)].get("below_sync")]
    broke = ", ".join(f"{m} ({as_float(c['gap_vs_sync']['mean']) * 100:+.1f})" for m, c in below) or "none"
    collapsed = [m for m, row in grid.items() if row.get(str(k), {}).get("collapsed")]
    if sync and sync["n"] < 2 or all(row.get(str(k), {}).get("n", 0) < 2 for row in grid.values()):
        broke = f"{ONE_SEED}"
    near = 100 * as_float(summary.get("near_sync"))
    equivalent = [m for m, row in grid.items() if row.get(str(k), {}).get("gap_vs_sync", {}).get("verdict") == "equivalent"]
    lines.append(f"At K = {k}, below sync (Welch, Holm p < 0.05): {broke}; equivalent to sync within {near:g} "
                 f"points (TOST): {', '.join(equivalent) or 'none'}; collapsed: {', '.join(collapsed) or 'none'}.")
    holds = summary.get("holds_to_k") or {}
    lines.append(f"Largest K whose mean is within {near:.0f} points of sync (at it and every smaller K; a point "
                 "estimate, not a test): " + ", ".join(f"{m} {'none' if h is None else h}" for m, h in holds.items())
                 + ".")
    own = summary.get("holds_own_to_k") or {}
    if own:
        lines.append(f"Largest K whose mean is within {near:.0f} points of the same loss at K = 0 (point estimate): "
                     + ", ".join(f"{m} {'none' if h is None else h}" for m, h in own.items()) + ".")
    return lines


def _agent_arm_name(method: str, k: Any) -> str:
    kind = {"async-loglinear": "A-3PO", "async-recompute": "async recompute"}.get(method.rsplit("-k", 1)[0], method)
    return f"{kind} at W = K = {k}"


def headline_agent(summary: Mapping[str, Any], methods: Mapping[str, Any]) -> list[str]:
    """The agent suite (benchmarks.bench.agent_report): the ideal overlap sync allows, then one sentence
    per async arm (throughput ÷ sync, share of the ideal, oldest-token staleness, drops, eval gap with
    its test), then a verdict on the fastest arm."""
    arms = summary.get("arms") or {}
    if "sync" not in methods or not arms:
        return ["Sync or every async arm is missing from these runs: no comparison."]
    ideal = summary.get("ideal_overlap")
    lines = [f"Sync spends {seconds(summary.get('sync_gen_time_per_step_s'))} generating and "
             f"{seconds(summary.get('sync_train_time_per_step_s'))} training per step: perfect overlap would "
             f"train {ratio(ideal)} as fast (the ideal)."]
    for method, row in arms.items():
        share = as_float(row.get("share_of_ideal"))
        one = _one_seed(methods, method, "sync")
        lines.append(f"{_agent_arm_name(method, row.get('K'))}: {ratio(row.get('samples_per_s_ratio'))} sync's "
                     f"samples/s ({number(100 * share) + '%' if math.isfinite(share) else 'n/a'} of the ideal), "
                     f"{ratio(row.get('episodes_per_s_ratio'))} its episodes/s; oldest-token staleness "
                     f"{number(row.get('staleness_oldest_mean'))} on average "
                     f"(max {number(row.get('staleness_oldest_max'))}), "
                     f"{number(row.get('dropped_samples'))} samples dropped per run; eval reward "
                     f"{_gap_words(row.get('eval_gap_vs_sync'), 'sync', one)}.")
    rated = {m: as_float(r.get("samples_per_s_ratio")) for m, r in arms.items()}
    rated = {m: v for m, v in rated.items() if math.isfinite(v)}
    if not rated:
        return [*lines, "Verdict: no throughput comparison (an arm lacks samples_per_s)."]
    best = max(rated, key=rated.get)
    row = arms[best]
    gap = row.get("eval_gap_vs_sync")
    quality = (ONE_SEED if _one_seed(methods, best, "sync") else verdict_words(gap, 1.0)) if gap else "not compared"
    pace = "faster than" if rated[best] > 1 else "no faster than"
    return [*lines, f"Verdict: the fastest async arm, {_agent_arm_name(best, row.get('K'))}, trains {pace} sync "
                    f"({ratio(rated[best])} its samples/s, of an ideal {ratio(ideal)}); its eval reward against "
                    f"sync: {quality}."]
