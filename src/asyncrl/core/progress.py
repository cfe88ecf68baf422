"""What a run shows while it runs, on stderr (stdout carries only the final summary line).

Start-up phases ("loading model", "starting 2 rollout workers", "first batch") are a line each.
In a terminal, training is then one live rich line (step, reward, eval, staleness, trainer wait,
dropped samples, samples/s, tokens/s, ESS, elapsed, ETA). Elsewhere (nohup, SLURM, ``2> log``): a live line
would be one endlessly rewritten, truncated line, so each phase and each step is a plain line::

    step 12/200  reward 0.531  eval 0.470  stale 1.2/3  wait 0.41s  dropped 0  samples/s 18.2  elapsed 0:01:07

With two or more reward functions, each one's mean follows the reward (``reward 0.620  hit 0.41
fmt 0.90``).

With ``hold_phases`` (a training run), the phases before the run directory exists ("loading task",
"loading model") are held back there and printed once the run is under way (:meth:`release_phases`):
a run refused for bad input then says so in exactly one line on stderr, what scripts and
``2> log`` files see. A terminal shows them at once, above the error if there is one.
"""

from __future__ import annotations

import math
import time
from datetime import timedelta

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn


def _num(record: dict, key: str) -> float | None:
    value = record.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def _label(name: str, width: int = 12) -> str:
    return name if len(name) <= width else name[:width - 1] + "…"


def step_fields(record: dict, batch_size: int | None = None) -> list[tuple[str, str]]:
    """(label, value) pairs of one step's record, in display order; absent quantities are left out."""
    out = []

    def add(label: str, key: str, fmt: str) -> None:
        value = _num(record, key)
        if value is not None:
            out.append((label, fmt.format(value)))

    add("sft loss", "sft_loss", "{:.3f}")  # the warm start's
    add("reward", "reward_mean", "{:.3f}")
    functions = [k for k in record if k.startswith("reward/") and k != "reward/errors"]
    if len(functions) >= 2:  # one function's mean is the reward itself (up to its weight)
        for key in functions:
            add(_label(key.removeprefix("reward/")), key, "{:.2f}")
    add("eval", "eval_reward", "{:.3f}")
    add("turns", "episode/turns_mean", "{:.1f}")  # multi-turn episodes only
    mean, top = _num(record, "staleness_token_mean"), _num(record, "staleness_token_max")
    if mean is not None and top is not None:
        out.append(("stale", f"{mean:.1f}/{top:.0f}"))
    add("wait", "trainer_wait_s", "{:.2f}s")
    add("dropped", "dropped_samples", "{:.0f}")
    step_s = _num(record, "step_time_s")
    if batch_size and step_s:
        out.append(("samples/s", f"{batch_size / step_s:.1f}"))
    add("tok/s", "throughput_tokens_per_s", "{:,.0f}")
    add("ess", "ess_frac", "{:.2f}")
    return out


# most important first; a narrow terminal drops fields from the end of this list (the step counter,
# elapsed time and ETA are columns of their own and always stay)
FIELD_PRIORITY = ("ess warning", "sft loss", "ess", "reward", "eval", "turns", "stale", "samples/s", "wait",
                  "dropped", "tok/s")


def _width(fields: list[tuple[str, str]]) -> int:
    return len("  ".join(f"{k} {v}" for k, v in fields))


def fit_fields(fields: list[tuple[str, str]], width: int) -> list[tuple[str, str]]:
    """The fields that fit in ``width`` characters (``label value``, two spaces apart), the least
    important (:data:`FIELD_PRIORITY`) dropped first; the display order is kept."""
    def rank(field: tuple[str, str]) -> int:
        return FIELD_PRIORITY.index(field[0]) if field[0] in FIELD_PRIORITY else len(FIELD_PRIORITY)

    kept = list(fields)
    while kept and _width(kept) > width:
        kept.remove(max(reversed(kept), key=rank))  # of equal rank, the rightmost goes first
    return kept


class TrainProgress:
    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None,
                 batch_size: int | None = None, hold_phases: bool = False):
        self.enabled = enabled
        self.total, self.description, self.batch_size = total, description, batch_size
        self.console = console or Console(stderr=True)
        self.live = enabled and self.console.is_terminal
        self.started = time.monotonic()
        self.bar_width = 20 if self.console.width >= 120 else 8  # room for the fields at 80 columns
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=self.bar_width), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
            console=self.console, disable=not self.live,
        )
        self.task = self.progress.add_task(description, total=total, status="starting")
        # phase lines not printed yet (None: print each at once); see the module docstring
        self.held: list[str] | None = [] if hold_phases and not self.live else None

    def __enter__(self) -> "TrainProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def phase(self, text: str) -> None:
        """What the run is doing before its first step ("loading model", "first batch")."""
        if not self.enabled:
            return
        # a line of its own in both modes: the live display only starts with the training loop
        if self.held is not None:
            self.held.append(f"{self.description}: {text}")
        else:
            self._plain(f"{self.description}: {text}")
        self.progress.update(self.task, status=f"[dim]{text}…[/]")

    def release_phases(self) -> None:
        """Print the held phase lines; later phases print at once (the run directory exists)."""
        held, self.held = self.held or [], None
        for line in held:
            self._plain(line)

    def step(self, step: int, record: dict, ess_warning: bool = False) -> None:
        """A finished training step; ``ess_warning``: the ESS warning fired (shown as "!")."""
        fields = step_fields(record, self.batch_size)
        if ess_warning:
            fields.append(("ess warning", "!"))
        if self.live:
            fields = fit_fields(fields, self._status_width())
            self.progress.update(self.task, completed=step,
                                 status="  ".join(f"{k} [bold]{v}[/]" for k, v in fields))
        elif self.enabled:
            seconds = _num(record, "elapsed_s")  # the run's clock (a resumed run's continues)
            elapsed = timedelta(seconds=round(time.monotonic() - self.started if seconds is None else seconds))
            self._plain("  ".join([f"step {step}/{self.total}", *(f"{k} {v}" for k, v in fields),
                                   f"elapsed {elapsed}"]))

    def update(self, step: int, reward: float | None = None, eval_acc: float | None = None,
               tokens_per_s: float | None = None, ess: float | None = None, ess_warning: bool = False,
               elapsed_s: float | None = None, sft_loss: float | None = None) -> None:
        """A step from named values (the warm start and the TRL peer report through this);
        ``elapsed_s``: the run's clock, so step 0 and later steps count from the same start."""
        record = {"reward_mean": reward, "eval_reward": eval_acc, "throughput_tokens_per_s": tokens_per_s,
                  "ess_frac": ess, "elapsed_s": elapsed_s, "sft_loss": sft_loss}
        self.step(step, record, ess_warning)

    def _status_width(self) -> int:
        """Characters left for the fields on one line: the width less the other columns
        (description, bar, " 12/200", elapsed, "ETA", remaining) and the spaces between them."""
        counter = 2 * len(str(self.total)) + 1
        return self.console.width - (len(self.description) + self.bar_width + counter + 7 + 3 + 7 + 6) - 1

    def _plain(self, line: str) -> None:
        # no markup or wrapping: one physical line per event, whatever the reader's width
        self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def log(self, message: str) -> None:
        if self.enabled:
            self.console.print(message, soft_wrap=not self.live)

    def show(self, renderable) -> None:
        """A rich renderable (a table of sample completions) above the live line, or between
        the plain lines."""
        if self.enabled:
            self.console.print(renderable)
