"""Where a run writes and how it reports: ``run.*``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from asyncrl.core.loader import setting
from asyncrl.core.registries import MODES


@dataclass
class RunConfig:
    """Where a run writes and how it reports."""

    out_dir: str = setting("runs", "directory that holds the run directories")
    name: str | None = setting(None, "run directory name; null = <mode>-<loss>-s<seed>-<timestamp>")
    seed: int = setting(0, "seed of every random stream (sampling, minibatch order, init)")
    mode: str = setting(
        "async", "sync: generate then train; async: workers generate meanwhile; simulated: exact lag; "
                  "or a plugin's (asyncrl.core.registries.MODES)", names=MODES)
    # imported by the run's validation (asyncrl.runtime.validate) before any name is checked; every
    # rollout worker and benchmark cell validates its config the same way, so they import them too
    # (docs/runtime.md)
    plugins: list[str] = setting(
        help="modules (pkg.module) that register parts at import: tasks, losses, modes, backends, engines, "
             "channels, trackers, bench suites",
        factory=list)
    checkpoint_every: int = setting(0, "steps between checkpoints; 0 = only at the end")
    keep_checkpoints: int = setting(2, "newest checkpoints kept in <run dir>/checkpoints/; 0 = all")
    resume: Literal["no", "auto", "must"] = setting(
        "no", "no: new run (existing dir refused); auto: resume <out_dir>/<name> if it has a "
              "checkpoint, else start; must: resume or fail")
    checkpoint_on_signal: bool = setting(
        True, "on SIGTERM / SIGINT checkpoint the last finished step, then exit")
    report_to: list[str] = setting(
        help="experiment trackers: tensorboard, wandb, mlflow, trackio, or a plugin's (asyncrl.tracking.TRACKERS); "
             "[] = metrics.jsonl only",
        factory=lambda: ["tensorboard"])
    # deprecated alias kept so old configs load: false drops tensorboard from report_to
    tensorboard: bool = setting(True, "deprecated: false = drop tensorboard from run.report_to")
    log_completions_every: int = setting(
        25, "steps between sample-completion tables (completions.jsonl, trackers); 0 = off")
    log_episodes_every: int = setting(
        10, "steps between episodes.jsonl rows (every episode of the step: turns, tool calls and results, "
            "rewards, versions, end reason); 0 = off")
    print_completions: int = setting(
        0, "sample completions also printed on the console as a table (prompt, completion, each reward "
           "function's value) at those steps, TRL's log_completions; 0 = none")
    report: bool = setting(True, "write <run dir>/report.html (curves, staleness, time split) at the end")
    progress: bool = setting(True, "live progress line (rich); off for subprocesses that parse stdout")
    # CPU runs are bitwise reproducible without it; GPU kernels need it, at some speed cost
    deterministic: bool = setting(
        False, "torch.use_deterministic_algorithms in trainer and workers (reproducible GPU runs)")

    def validate(self) -> None:
        # the trackers' names are checked against asyncrl.tracking.TRACKERS by asyncrl.runtime.validate
        if not self.tensorboard:  # the deprecated switch, folded into report_to once
            self.report_to = [name for name in self.report_to if name != "tensorboard"]
            self.tensorboard = True
        if self.log_completions_every < 0:
            raise ValueError("log_completions_every: must be >= 0")
        if self.log_episodes_every < 0:
            raise ValueError("log_episodes_every: must be >= 0")
        if self.print_completions < 0:
            raise ValueError("print_completions: must be >= 0")
        if self.print_completions and not self.log_completions_every:
            raise ValueError("print_completions: prints at the steps of run.log_completions_every, which is 0 "
                             "(set it, e.g. run.log_completions_every=10)")
        if self.checkpoint_every < 0:
            raise ValueError("checkpoint_every: must be >= 0")
        if self.keep_checkpoints < 0:
            raise ValueError("keep_checkpoints: must be >= 0")
        if self.resume != "no" and self.name is None:
            raise ValueError("resume: needs run.name (the run directory to resume), or use --resume RUN_DIR")
        # a plain name: "..", "a/b" or an absolute path would write outside out_dir
        if self.name is not None and (any(c in self.name for c in "/\\\0")
                                      or self.name.strip() in ("", ".", "..")):
            raise ValueError(f"name: must be a plain directory name (not empty, '.' or '..'; no '/'), "
                             f"got {self.name!r}")
        # 255 bytes: the longest file name of ext4, xfs, btrfs, tmpfs and NFS
        if self.name is not None and len(self.name.encode("utf-8", "surrogateescape")) > 255:
            raise ValueError(f"name: {len(self.name.encode('utf-8', 'surrogateescape'))} bytes, longer than a "
                             f"directory name may be (255); got {self.name[:40]!r}...")

