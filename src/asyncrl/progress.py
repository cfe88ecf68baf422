"""Live progress line (rich): step, reward, eval accuracy, tokens/s, ETA."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
    TimeRemainingColumn


class TrainProgress:
    def __init__(self, total: int, description: str, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(bar_width=24), MofNCompleteColumn(),
            TextColumn("reward {task.fields[reward]}"), TextColumn("eval {task.fields[eval]}"),
            TextColumn("{task.fields[tps]} tok/s"), TextColumn("ess {task.fields[ess]}"), TimeElapsedColumn(), TextColumn("ETA"),
            TimeRemainingColumn(), console=console or Console(stderr=True), disable=not enabled,
        )
        self.task = self.progress.add_task(description, total=total, reward="-", eval="-", tps="-", ess="-")

    def __enter__(self) -> "TrainProgress":
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def update(self, step: int, reward: float | None = None, eval_acc: float | None = None,
               tokens_per_s: float | None = None, ess: float | None = None, ess_warning: bool = False) -> None:
        """``ess``: the step's ESS fraction; ``ess_warning``: the ESS warning fired (shown as "!")."""
        fields = {}
        if ess is not None:
            fields["ess"] = f"{ess:.2f}" + ("[bold red]![/]" if ess_warning else "")
        if reward is not None:
            fields["reward"] = f"{reward:.3f}"
        if eval_acc is not None:
            fields["eval"] = f"{eval_acc:.1%}"
        if tokens_per_s is not None:
            fields["tps"] = f"{tokens_per_s:,.0f}"
        self.progress.update(self.task, completed=step, **fields)

    def log(self, message: str) -> None:
        if self.enabled:
            self.progress.console.print(message)
