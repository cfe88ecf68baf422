"""``<run dir>/report.html``: one self-contained page per finished ``asyncrl train`` run.

Reward and eval curves (and per reward function), loss / KL / entropy / ESS / completion length,
the staleness histogram over the whole run, where the time went
(generation, training, waiting, weight sync), utilisation over time and the last sample
completions, from the files the run already wrote (metrics.jsonl, completions.jsonl,
summary.json). Figures are PNGs inlined as base64, so the page can be mailed as one file. It
takes about a second; a failure costs the run nothing but a one-line warning.
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Callable
from pathlib import Path

from asyncrl.core.plotting import new_figure, png_bytes


def _rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a torn last line of a killed run
            continue
    return out


def _series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) where ``key`` holds a finite number."""
    pairs = [(r["step"], r[key]) for r in records
             if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def _png(fig) -> str:
    try:
        return base64.b64encode(png_bytes(fig, palette=True)).decode("ascii")
    finally:
        fig.clear()


def reward_figure(records: list[dict]) -> str:
    fig = new_figure()
    ax = fig.subplots()
    steps, reward = _series(records, "reward_mean")
    ax.plot(steps, reward, color="C0", lw=1.2, label="train reward (batch mean)")
    steps, evals = _series(records, "eval_reward")
    ax.plot(steps, evals, "o-", color="C1", lw=1.5, label="eval reward")
    ax.set(xlabel="step", ylabel="reward", title="Reward")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return _png(fig)


def staleness_counts(records: list[dict]) -> list[int]:
    """Tokens per version lag, summed over every step."""
    total: list[int] = []
    for r in records:
        for lag, n in enumerate(r.get("staleness_token_hist") or []):
            total.extend([0] * (lag + 1 - len(total)))
            total[lag] += n
    return total


def staleness_figure(counts: list[int]) -> str:
    fig = new_figure(height=0.8)
    ax = fig.subplots()
    n = sum(counts) or 1
    ax.bar(range(len(counts)), [c / n for c in counts], color="C2")
    ax.set_xticks(range(len(counts)))
    ax.set(xlabel="staleness (policy versions behind the trainer)", ylabel="fraction of trained tokens",
           title="Staleness of the trained tokens, whole run")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


TIME_PARTS = (("generation", "gen_time_per_step_s"), ("training", "train_time_per_step_s"),
              ("trainer waiting for data", "wait_time_per_step_s"),
              ("weight publish", "weight_publish_per_step_s"), ("weight pull", "weight_pull_per_step_s"))


def time_split(summary: dict) -> list[tuple[str, float]]:
    return [(label, float(summary[key])) for label, key in TIME_PARTS
            if isinstance(summary.get(key), (int, float)) and math.isfinite(summary[key])]


def time_figure(parts: list[tuple[str, float]]) -> str:
    fig = new_figure(height=0.7)
    ax = fig.subplots()
    labels, values = [p[0] for p in parts], [p[1] for p in parts]
    ax.barh(range(len(parts)), values, color=[f"C{i}" for i in range(len(parts))])
    ax.set_yticks(range(len(parts)), labels)
    ax.invert_yaxis()
    for i, v in enumerate(values):
        ax.annotate(f"{v * 1e3:.0f} ms" if v < 1 else f"{v:.2f} s", (v, i), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8)
    ax.margins(x=0.15)  # room for the value labels
    ax.set(xlabel="seconds per step (mean)", title="Where a step's time goes")
    ax.grid(axis="x", alpha=0.3)
    return _png(fig)


def utilisation_figure(records: list[dict]) -> str:
    fig = new_figure(height=0.8)
    ax = fig.subplots()
    for key, label, color in (("generator_util", "generators busy", "C0"), ("trainer_util", "trainer busy", "C3")):
        steps, values = _series(records, key)
        ax.plot(steps, values, color=color, lw=1.2, label=label)
    ax.set(xlabel="step", ylabel="fraction of the step", title="Utilisation", ylim=(0, 1.05))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return _png(fig)


KL_PANEL = "KL (nats per token)"
TOOL_LATENCY_PANEL = "Tool latency (s per call)"
REFERENCE_KL = ("kl_ref", "to π_ref, the starting weights (trainer.kl_coef)")

# (panel title, ((metrics.jsonl key, line label), ...)): a panel none of whose keys a run logged is left out
SIGNAL_PANELS = (
    ("Policy loss", (("loss", "loss"),)),
    (KL_PANEL, (REFERENCE_KL, ("approx_kl_k3", "per update, from π_prox or else the behaviour policy (k3)"))),
    ("Entropy (nats per token)", (("entropy", "entropy"),)),
    ("ESS fraction", (("ess_frac", "mean over updates"), ("ess_frac_min", "lowest update"))),
    ("Completion length (tokens)", (("completion_len_mean", "mean"),)),
    # multi-turn episodes (env.*): a run of single completions logs none of these
    ("Turns per episode", (("episode/turns_mean", "mean"), ("episode/turns_max", "max"))),
    ("Episode length (tokens after the prompt)", (("episode/len_mean", "mean"), ("episode/len_p90", "90th percentile"),
                                                  ("episode/len_max", "max"))),
    ("Observed (masked) token share", (("episode/masked_token_frac", "observation tokens / episode tokens"),)),
    ("Environment and tool time (s per step)", (("episode/env_time_s", "seconds"),)),
    ("Environment's return per episode", (("episode/env_reward_mean", "mean of Σ γ^(t-1) r_t"),)),
    (TOOL_LATENCY_PANEL, ()),  # a line per tool the run called: tool_latency_lines
    ("Staleness of the oldest trained token", (("staleness_seq_mean", "mean over rows"),
                                               ("staleness_seq_max", "max"))),
)


def update_anchor(loss: str | None, prox: str | None) -> str:
    """What ``approx_kl_k3`` measures KL from (asyncrl.objectives.stats: KL(π_anchor ‖ π_θ) of each
    update): π_prox when the run's loss reads the proximal policy ``trainer.prox`` gives, else the
    behaviour policy that sampled the tokens."""
    from asyncrl.objectives.registry import LOSSES, PROX_NEVER

    entry = LOSSES.get(loss) if loss else None
    if entry is None or prox is None:  # a run that did not say (an older summary, a peer's)
        return "π_prox or else the behaviour policy"
    if prox == "none" or entry.reads_prox == PROX_NEVER:
        return "π_behav, the policy that sampled"
    return f"π_prox (trainer.prox={prox})"


def tool_latency_lines(records: list[dict]) -> tuple:
    """A line per ``tool/<name>/latency_mean_s`` key the run logged, by tool name."""
    keys = sorted({k for r in records for k in r if k.startswith("tool/") and k.endswith("/latency_mean_s")})
    return tuple((key, key.split("/")[1]) for key in keys)


def signal_panels(summary: dict, records: list[dict] = ()) -> tuple:
    """:data:`SIGNAL_PANELS` for the run of ``summary`` and its ``records``: the KL lines saying KL
    to what, the tool-latency panel a line per tool."""
    kl_lines = (REFERENCE_KL,
                ("approx_kl_k3", f"per update, from {update_anchor(summary.get('loss'), summary.get('prox'))} (k3)"))
    filled = {KL_PANEL: kl_lines, TOOL_LATENCY_PANEL: tool_latency_lines(list(records))}
    return tuple((title, filled.get(title, lines)) for title, lines in SIGNAL_PANELS)


def logged_panels(records: list[dict], panels=SIGNAL_PANELS) -> list[tuple[str, list[tuple[str, str]]]]:
    """The panels (and of each, the lines) with at least one finite value in ``records``."""
    out = []
    for title, lines in panels:
        present = [(key, label) for key, label in lines if _series(records, key)[0]]
        if present:
            out.append((title, present))
    return out


def signals_figure(panels: list[tuple[str, list[tuple[str, str]]]], records: list[dict]) -> str:
    ncols = min(3, len(panels))
    nrows = -(-len(panels) // ncols)
    fig = new_figure(ncols=ncols, height=0.7 * nrows)
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    for ax, (title, lines) in zip(axes, panels):
        for i, (key, label) in enumerate(lines):
            ax.plot(*_series(records, key), color=f"C{i}", lw=1.2, label=label)
        ax.set(xlabel="step", title=title)
        ax.grid(alpha=0.3)
        if len(lines) > 1:
            ax.legend(fontsize=7, frameon=False)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    return _png(fig)


def reward_function_keys(records: list[dict]) -> list[str]:
    """``reward/<name>`` keys (one per reward function, reward.funcs), ``reward/errors`` excluded."""
    keys = {k for r in records for k in r if k.startswith("reward/") and k != "reward/errors"}
    return sorted(k for k in keys if _series(records, k)[0])


def reward_functions_figure(keys: list[str], records: list[dict]) -> str:
    fig = new_figure(height=0.8)
    ax = fig.subplots()
    for i, key in enumerate(keys):
        ax.plot(*_series(records, key), color=f"C{i}", lw=1.2, label=key.removeprefix("reward/"))
    ax.set(xlabel="step", ylabel="mean value in the batch", title="Reward per function")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    return _png(fig)


def facts(summary: dict) -> list[tuple[str, str]]:
    """The page's header: what ran and what came out, in words."""
    def num(key: str, fmt: str) -> str | None:
        value = summary.get(key)
        return fmt.format(value) if isinstance(value, (int, float)) and math.isfinite(value) else None

    rows = [("mode / loss / prox", f"{summary.get('mode')} / {summary.get('loss')} / {summary.get('prox')}"),
            ("steps", str(summary.get("steps"))), ("device", str(summary.get("device"))),
            ("eval reward", f"{num('initial_eval_reward', '{:.3f}')} before → "
                            f"{num('final_eval_reward', '{:.3f}')} after"),
            ("training wall time", num("train_wall_s", "{:.1f} s")),
            ("total wall time", num("wall_time_s", "{:.1f} s")),
            ("samples per second", num("samples_per_s", "{:.2f}")),
            ("dropped samples (too stale)", num("dropped_samples_total", "{:.0f}"))]
    return [(k, v) for k, v in rows if v is not None and "None before → None after" not in v]


def write_run_report(run_dir: Path, summary: dict) -> Path:
    import jinja2

    run_dir = Path(run_dir)
    records = [r for r in _rows(run_dir / "metrics.jsonl") if isinstance(r.get("step"), int)]
    completions = _rows(run_dir / "completions.jsonl")
    last = max((c["step"] for c in completions), default=None)
    counts = staleness_counts(records)
    parts = time_split(summary)
    figures = [("Train reward per step and eval reward (step 0 = before training).", reward_figure(records))]
    functions = reward_function_keys(records)
    if functions:
        figures.append(("Mean raw value of each reward function per step (before weighting).",
                        reward_functions_figure(functions, records)))
    panels = logged_panels(records, signal_panels(summary, records))
    if panels:
        figures.append(("Training signals per step: policy loss, KL (of the policy to its starting weights, "
                        "with trainer.kl_coef; and of each update from the policy it is anchored at), token "
                        "entropy, ESS fraction of the importance weights, completion length (those the run logged).",
                        signals_figure(panels, records)))
    if counts:
        figures.append(("Share of trained tokens per staleness (0 = generated by the weights being trained).",
                        staleness_figure(counts)))
    if parts:
        figures.append(("Mean seconds per step. Sync mode waits for all of generation; async overlaps them. "
                        "Generation is summed over workers.", time_figure(parts)))
    figures.append(("Share of each step the generators and the trainer were busy.", utilisation_figure(records)))
    env = jinja2.Environment(loader=jinja2.PackageLoader("asyncrl.runtime", "templates"), autoescape=True)
    page = env.get_template("run_report.html.j2").render(
        title=run_dir.name, facts=facts(summary), figures=figures, completions_step=last,
        completions=[c for c in completions if c["step"] == last])
    tmp = run_dir / "report.html.tmp"
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(run_dir / "report.html")
    return run_dir / "report.html"


def write_run_report_safely(run_dir: Path, summary: dict, log: Callable[[str], None] = print) -> Path | None:
    """:func:`write_run_report`, but a failure is one warning line: the run itself is finished."""
    try:
        return write_run_report(run_dir, summary)
    except Exception as err:  # noqa: BLE001 — any failure here must not fail a finished run
        log(f"warning: report.html not written ({type(err).__name__}: {err})")
        return None
