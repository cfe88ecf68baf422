"""A run's opening and closing: the checks that refuse it before any work, the run directory and
its lock, ``config.yaml``, the policy, the task, the row files and trackers, and the summary. What
happens in between (the steps, evaluations, checkpoints) is the loop's (:mod:`asyncrl.runtime.loop`).

Run directory: ``config.yaml`` (the resolved configuration), ``metrics.jsonl`` (a row per step;
step 0 = the evaluation before training), ``ledger.jsonl`` (per step, the prompt groups trained on
and those dropped as too stale), ``completions.jsonl`` (sample completions), ``episodes.jsonl`` (episodes
as data), ``tensorboard/`` (and
other trackers' files, per ``run.report_to``), ``checkpoints/`` (see :mod:`asyncrl.training.checkpoint`)
and, once finished, ``summary.json`` and ``report.html``. A resumed run cuts the row files back to
its checkpoint's step, so no step is ever recorded twice."""

from __future__ import annotations

import json
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import yaml

from asyncrl.config import Config, ConfigError
from asyncrl.core.disk import write_text_atomic
from asyncrl.core.progress import TrainProgress
from asyncrl.policy.lora import apply_lora
from asyncrl.policy.model import check_device, load_policy_for, set_deterministic
from asyncrl.rewards import RewardSet
from asyncrl.runtime.completions import CompletionLog
from asyncrl.runtime.episode_log import EpisodeLog
from asyncrl.runtime.preflight import check_task, check_writable
from asyncrl.runtime.resume import Resume, check_fits, find_resume
from asyncrl.runtime.run_lock import RunLock
from asyncrl.runtime.signals import StopRequests
from asyncrl.tasks import Problem, Task, configured_task
from asyncrl.tracking import open_trackers
from asyncrl.tracking.metrics import (
    ROW_FILES,
    Ledger,
    MetricsWriter,
    check_row_files,
    json_safe,
    readable_floats,
)
from asyncrl.training.checkpoint import set_global_rng_state, step_dirs
from asyncrl.training.pretrain import warm_start


def warm_start_if_needed(cfg: Config, task: Task | None = None, progress: TrainProgress | None = None) -> Path:
    """The starting weights: ``policy.model_path`` if set, else the cached warm start, trained
    first when there is none (minutes, with its own step display on stderr). ``task``: the run's,
    when already built; ``progress``: the run's, which shows the phase."""
    if cfg.policy.model_path:
        return Path(cfg.policy.model_path)
    if progress is not None:
        progress.phase("warm start")
    return warm_start(cfg, task)

def device_name(device: str) -> str:
    """What the run ran on, for summaries and reports ("cpu", or the GPU's name)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return torch.device(device).type


def run_dir_of(cfg: Config) -> Path:
    if cfg.run.name is None:  # the name is resolved once and saved, so the run can be resumed by it
        cfg.run.name = f"{cfg.run.mode}-{cfg.loss.name}-s{cfg.run.seed}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    return Path(cfg.run.out_dir) / cfg.run.name


def write_config(cfg: Config, run_dir: Path) -> None:
    data = cfg.to_dict()
    data["run"]["resume"] = "no"  # how this process started is not part of the run
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(data, sort_keys=False))


def load_resumed_policy(cfg: Config, resume: Resume, policy_dir: Path):
    """The model and tokenizer of a checkpoint (a LoRA run: the starting weights plus the saved adapter)."""
    if not cfg.policy.lora_rank:
        return load_policy_for(cfg.policy, resume.checkpoint)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    model, tokenizer = load_policy_for(cfg.policy, policy_dir)
    model = apply_lora(model, cfg.policy)  # a fresh adapter, then the saved one's weights
    set_peft_model_state_dict(model, load_file(resume.checkpoint / "lora_adapter" / "adapter_model.safetensors"))
    return model, tokenizer


@dataclass
class RunStart:
    """A run that passed the checks that cost little, before its starting weights are built: it
    wrote nothing, and holds the run directory's lock only where another run made its file."""

    cfg: Config
    run_dir: Path
    lock: RunLock
    resume: Resume | None  # the checkpoint the run continues from
    kept_step: int  # rows kept: up to the checkpoint's step; -1 = none (a fresh start over old rows)
    seen: tuple  # what decides how the run starts (_contents), to compare once the lock is taken
    progress: TrainProgress
    task: Task
    rewards: RewardSet

    @classmethod
    def check(cls, cfg: Config) -> "RunStart":
        """Refuse a run that cannot start (the device, ``run.out_dir``, a run directory in use,
        the resume point, damaged rows, the task, the reward functions) before a warm start of minutes."""
        check_device(cfg.policy.device)
        check_writable(cfg.run.out_dir)
        set_deterministic(cfg.run.deterministic)
        torch.manual_seed(cfg.run.seed)
        run_dir = run_dir_of(cfg)
        lock = RunLock(run_dir)
        lock.try_existing()  # a run directory another run is writing: refused now, before any work
        try:
            return cls._check(cfg, run_dir, lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _check(cls, cfg: Config, run_dir: Path, lock: RunLock) -> "RunStart":
        resume = find_resume(cfg, run_dir)
        seen = _contents(run_dir)
        # where an attempt without a checkpoint left rows (run.resume=auto), step 0 is written once
        kept_step = resume.step if resume else (-1 if any((run_dir / name).exists() for name in ROW_FILES) else 0)
        try:
            check_row_files(run_dir, kept_step)
        except ValueError as err:  # a damaged row: refused before config.yaml or any row is rewritten
            raise ConfigError("--resume", str(err)) from None
        progress = TrainProgress(cfg.trainer.steps, f"{cfg.run.mode}/{cfg.loss.name}",
                                 enabled=cfg.run.progress, batch_size=cfg.rollout.batch_size, hold_phases=True)
        progress.phase("loading task")
        task = configured_task(cfg.task, need_eval=cfg.eval.n_problems > 0)
        rewards = RewardSet.from_config(cfg.reward, task)  # resolved from the config's import paths, as workers do
        return cls(cfg, run_dir, lock, resume, kept_step, seen, progress, task, rewards)

    @contextmanager
    def released_on_error(self) -> Iterator[None]:
        """Let the lock go if the run fails to open."""
        try:
            yield
        except BaseException:
            self.lock.release()
            raise


@dataclass
class Session:
    """A run in progress: configuration, policy, task, run directory and its files."""

    cfg: Config
    run_dir: Path
    model: torch.nn.Module
    tokenizer: object
    task: Task
    train_problems: list[Problem]
    eval_problems: list[Problem]
    metrics: MetricsWriter
    progress: TrainProgress
    ledger: Ledger
    # sample completions every run.log_completions_every steps (the default writes none)
    completions: CompletionLog
    lock: RunLock  # the run directory's lock, held until the run ends
    # the starting weights, which rollout workers load before their first pull (a resumed run's
    # checkpoint may be pruned while a restarted worker still needs something to load)
    policy_dir: Path
    resume: Resume | None = None  # the checkpoint this run continues from
    rewards: RewardSet | None = None  # the reward functions (reward.funcs): rollout scoring and evaluation
    prompt_counts: dict[str, int] = field(default_factory=dict)  # over-long prompts dropped/truncated
    started: float = field(default_factory=time.time)
    stop: StopRequests = field(default_factory=StopRequests)
    episodes: EpisodeLog | None = None  # episodes.jsonl every run.log_episodes_every steps

    @property
    def start_step(self) -> int:
        return self.resume.step if self.resume else 0

    @property
    def start_version(self) -> int:
        return self.resume.version if self.resume else 0

    @classmethod
    def open(cls, start: RunStart, policy_dir: Path) -> "Session":
        """Load the policy (a resumed run's from its checkpoint), check the task against it, then
        take the run directory's lock and write ``config.yaml``: a refused run writes nothing."""
        cfg, run_dir, progress, resume = start.cfg, start.run_dir, start.progress, start.resume
        progress.phase("loading model")
        if resume is None:
            model, tokenizer = load_policy_for(cfg.policy, policy_dir)
            model = apply_lora(model, cfg.policy)  # trainer side only: workers load the plain base model
        else:
            check_fits(cfg, resume, policy_dir)  # another model's checkpoint: refused before it loads
            model, tokenizer = load_resumed_policy(cfg, resume, policy_dir)
        # over-long prompts, a broken reward: before the run directory
        fit = check_task(cfg, start.task, tokenizer, model, start.rewards)
        start.lock.acquire()
        if _contents(run_dir) != start.seen:  # another run wrote here since the checks
            raise ConfigError("run.name", f"{run_dir} was written by another run while this one started; "
                                          "start it again")
        write_config(cfg, run_dir)
        progress.release_phases()  # the run is under way: what it did so far, then what it does
        note = fit.message(cfg.task.max_prompt_length)
        if note is not None and cfg.run.progress:
            progress.log(note)
        elif note is not None:
            print(f"asyncrl: {note}", file=sys.stderr)
        step = start.kept_step
        session = cls(cfg, run_dir, model, tokenizer, start.task, fit.train, fit.eval[: cfg.eval.n_problems],
                      MetricsWriter(run_dir, open_trackers(cfg.run.report_to, run_dir, cfg, step), after_step=step),
                      progress, Ledger(run_dir, after_step=step),
                      CompletionLog(run_dir, cfg.run.log_completions_every, cfg.trainer.steps, step,
                                    n_printed=cfg.run.print_completions),
                      start.lock, policy_dir, resume=resume, rewards=start.rewards, prompt_counts=fit.counts(),
                      episodes=EpisodeLog(run_dir, cfg.run.log_episodes_every, cfg.trainer.steps, step))
        if resume is not None:
            state = resume.run_state["session"]
            session.started = time.time() - float(state["elapsed_s"])  # wall time continues the run's
            set_global_rng_state(resume.trainer_state["global_rng"])
        return session

    def elapsed_s(self) -> float:
        """Seconds on the run's clock: since the session opened (a resumed run's continues)."""
        return time.time() - self.started

    def close(self) -> None:
        """Close the row files and trackers and release the run directory's lock."""
        self._close_files()
        self.release()

    def _close_files(self) -> None:
        self.metrics.close()
        self.ledger.close()
        self.completions.close()
        if self.episodes is not None:
            self.episodes.close()

    def release(self) -> None:
        """Let another process write this run directory (a resume): the run is over."""
        self.lock.release()

    def finish(self, steps: int, evaluations: dict, extra: dict, train_wall_s: float | None = None) -> dict:
        """Write ``summary.json`` (atomically, last: a run with one is finished) and return it.
        ``evaluations``: their summary (:meth:`~asyncrl.runtime.evaluate.Evaluations.summary`);
        ``train_wall_s``: seconds of the training loop, evaluations after step 0 excluded."""
        self._close_files()  # the lock is released last, once summary.json and the report exist
        summary = {
            "mode": self.cfg.run.mode,
            "loss": self.cfg.loss.name,
            "prox": self.cfg.trainer.prox,
            "seed": self.cfg.run.seed,
            "steps": steps,
            **evaluations,
            "wall_time_s": time.time() - self.started,
            # ru_maxrss is in KiB on Linux; children = rollout worker processes (largest one)
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "peak_rss_children_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "device": device_name(self.cfg.policy.device),
            "run_dir": str(self.run_dir),
        }
        if train_wall_s is not None:
            summary["train_wall_s"] = train_wall_s
            summary["time_per_step_s"] = train_wall_s / max(steps, 1)
            if train_wall_s > 0:  # training throughput: samples consumed per second of the loop
                summary["samples_per_s"] = steps * self.cfg.rollout.batch_size / train_wall_s
        summary.update(self.prompt_counts)
        summary.update(extra)
        summary = readable_floats(summary)  # 0.16875, not 0.16875000000000004: a file people read
        write_text_atomic(self.run_dir / "summary.json", json.dumps(json_safe(summary), indent=2, allow_nan=False))
        if self.cfg.run.report:
            from asyncrl.runtime.run_report import write_run_report_safely

            write_run_report_safely(self.run_dir, summary, log=self.progress.log)
        self.release()
        return summary


def _contents(run_dir: Path) -> tuple:
    """What decides how a run starts in ``run_dir``: its checkpoints and whether it has a config
    and a summary (compared before and after taking the lock)."""
    return (tuple(step for step, _ in step_dirs(run_dir)),
            *((run_dir / name).exists() for name in ("config.yaml", "summary.json")))
