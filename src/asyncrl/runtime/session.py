"""What every training mode shares: policy loading, the run directory, evaluation, checkpoints,
resuming and the summary. The loops (sync, async, simulated) differ only in where batches come from.

Run directory: ``config.yaml`` (the resolved configuration), ``metrics.jsonl`` (a row per step;
step 0 = the evaluation before training), ``ledger.jsonl`` (per step, the prompt groups trained on
and those dropped as too stale), ``completions.jsonl`` (sample completions), ``tensorboard/`` (and
other trackers' files, per ``run.report_to``), ``checkpoints/`` (see :mod:`asyncrl.training.checkpoint`)
and, once finished, ``summary.json`` and ``report.html``. A resumed run cuts the row files back to its checkpoint's step, so no step is
ever recorded twice."""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import yaml

from asyncrl.training.checkpoint import save_checkpoint, set_global_rng_state, step_dirs
from asyncrl.config import Config, ConfigError
from asyncrl.core.disk import write_text_atomic
from asyncrl.training.evaluation import eval_metrics
from asyncrl.tracking.metrics import (
    ROW_FILES,
    Ledger,
    MetricsWriter,
    check_row_files,
    json_safe,
    readable_floats,
)
from asyncrl.policy.lora import apply_lora
from asyncrl.policy.model import check_device, load_policy_for, set_deterministic
from asyncrl.training.pretrain import warm_start
from asyncrl.core.progress import TrainProgress
from asyncrl.rewards import RewardSet
from asyncrl.runtime.completions import CompletionLog
from asyncrl.runtime.eval_cache import cache_path, initial_eval_key
from asyncrl.runtime.eval_cache import load as load_cached_eval
from asyncrl.runtime.eval_cache import store as store_cached_eval
from asyncrl.runtime.preflight import check_task, check_writable
from asyncrl.runtime.resume import Resume, find_resume
from asyncrl.runtime.run_lock import RunLock
from asyncrl.runtime.signals import StopRequests
from asyncrl.stability.monitor import EssMonitor, EssStop
from asyncrl.tasks import Problem, Task
from asyncrl.tracking import open_trackers


def resolve_policy_dir(cfg: Config, task: Task | None = None) -> Path:
    """``policy.model_path`` if set, else the cached warm start (built on first use, with its
    progress on stderr; ``task``: the run's, when already built)."""
    if cfg.policy.model_path:
        return Path(cfg.policy.model_path)
    return warm_start(cfg, task)


def device_name(device: str) -> str:
    """What the run ran on, for summaries and reports ("cpu", or the GPU's name)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return torch.device(device).type


def workers_before_eval(cfg: Config) -> bool:
    """Whether the rollout engines must be started and ready before the step-0 evaluation: on CUDA,
    where an engine sizes its memory when it starts (vLLM measures the free GPU memory; memory the
    evaluation takes or frees meanwhile shrinks its KV cache or stops it), as they do before the
    trainer's first step allocates its optimizer state. On the CPU the evaluation overlaps their
    start-up."""
    return torch.device(cfg.policy.device).type == "cuda"


def run_dir_of(cfg: Config) -> Path:
    if cfg.run.name is None:  # the name is resolved once and saved, so the run can be resumed by it
        cfg.run.name = f"{cfg.run.mode}-{cfg.loss.name}-s{cfg.run.seed}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    return Path(cfg.run.out_dir) / cfg.run.name


def write_config(cfg: Config, run_dir: Path) -> None:
    data = cfg.to_dict()
    data["run"]["resume"] = "no"  # how this process started is not part of the run
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.yaml", yaml.safe_dump(data, sort_keys=False))


def load_resumed_policy(cfg: Config, resume: Resume):
    """The model and tokenizer of a checkpoint (a LoRA run: the original base plus the saved adapter)."""
    if not cfg.policy.lora_rank:
        return load_policy_for(cfg.policy, resume.checkpoint)
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    model, tokenizer = load_policy_for(cfg.policy, resolve_policy_dir(cfg))
    model = apply_lora(model, cfg.policy)  # a fresh adapter, then the saved one's weights
    set_peft_model_state_dict(model, load_file(resume.checkpoint / "lora_adapter" / "adapter_model.safetensors"))
    return model, tokenizer


@dataclass
class Session:
    """A run in progress: configuration, policy, task, outputs."""

    cfg: Config
    run_dir: Path
    model: torch.nn.Module
    tokenizer: object
    task: Task
    train_problems: list[Problem]
    eval_problems: list[Problem]
    metrics: MetricsWriter
    progress: TrainProgress
    started: float = field(default_factory=time.time)
    eval_history: list[tuple[int, float]] = field(default_factory=list)
    # eval_answer_acc per evaluation (tasks that can judge an answer whatever its format)
    answer_acc_history: list[tuple[int, float]] = field(default_factory=list)
    eval_time_s: float = 0.0  # evaluation seconds after step 0 (excluded from train_wall_s)
    ledger: Ledger | None = None
    resume: Resume | None = None  # the checkpoint this run continues from
    policy_dir: Path | None = None  # the starting weights, which rollout workers load before their first pull
    stop: StopRequests = field(default_factory=StopRequests)
    monitor: EssMonitor | None = None  # the ESS early warning (trainer.ess_warning)
    rewards: RewardSet | None = None  # the reward functions (reward.funcs): rollout scoring and evaluation
    train_wall_prior_s: float = 0.0  # training-loop seconds before this process resumed the run
    # sample completions every run.log_completions_every steps (the default writes none)
    completions: CompletionLog = field(default_factory=lambda: CompletionLog(Path("."), every=0, last_step=0))
    last_eval: dict[str, float] = field(default_factory=dict)  # metrics of the latest evaluation
    prompt_counts: dict[str, int] = field(default_factory=dict)  # over-long prompts dropped/truncated
    _clock: tuple[float, float] | None = None  # (perf_counter, eval_time_s) when the loop started
    lock: RunLock | None = None  # the run directory's lock, held until the run ends

    @property
    def start_step(self) -> int:
        return self.resume.step if self.resume else 0

    @property
    def start_version(self) -> int:
        return self.resume.version if self.resume else 0

    @classmethod
    def open(cls, cfg: Config) -> "Session":
        """Check everything, then take the run directory's lock and write ``config.yaml``: a refused
        run writes nothing, and a second writer on the same run directory is refused in one line."""
        check_device(cfg.policy.device)
        check_writable(cfg.run.out_dir)  # before a warm start of minutes, not after it
        set_deterministic(cfg.run.deterministic)
        torch.manual_seed(cfg.run.seed)
        run_dir = run_dir_of(cfg)
        lock = RunLock(run_dir)
        lock.try_existing()  # a run directory another run is writing: refused now, before any work
        try:
            return cls._open(cfg, run_dir, lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def _open(cls, cfg: Config, run_dir: Path, lock: RunLock) -> "Session":
        resume = find_resume(cfg, run_dir)  # before any work: a refused run writes nothing
        seen = _contents(run_dir)
        progress = TrainProgress(cfg.trainer.steps, f"{cfg.run.mode}/{cfg.loss.name}",
                                 enabled=cfg.run.progress, batch_size=cfg.rollout.batch_size, hold_phases=True)
        progress.phase("loading task")
        task = cfg.task.build()
        rewards = cfg.reward.build(task)  # resolved from the config's import paths, as workers do; before a warm start
        # the starting weights; rollout workers load them (a resumed run's checkpoint may be pruned
        # while a restarted worker still needs something to load) and then pull the current ones
        policy_dir = resolve_policy_dir(cfg, task)
        progress.phase("loading model")
        if resume is None:
            model, tokenizer = load_policy_for(cfg.policy, policy_dir)
            model = apply_lora(model, cfg.policy)  # trainer side only: workers load the plain base model
        else:
            model, tokenizer = load_resumed_policy(cfg, resume)
        fit = check_task(cfg, task, tokenizer, model, rewards)  # overlong prompts, a broken reward: before the run dir
        # rows kept: a resumed run's up to its checkpoint; -1 = none, for a run that starts afresh
        # where an attempt without a checkpoint left rows (run.resume=auto): step 0 is written once
        step = resume.step if resume else (-1 if any((run_dir / name).exists() for name in ROW_FILES) else 0)
        try:
            check_row_files(run_dir, step)
        except ValueError as err:  # a damaged row: refused before config.yaml or any row is rewritten
            raise ConfigError("--resume", str(err)) from None
        lock.acquire()
        if _contents(run_dir) != seen:  # another run wrote here since the checks above
            raise ConfigError("run.name", f"{run_dir} was written by another run while this one started; "
                                          "start it again")
        write_config(cfg, run_dir)
        progress.release_phases()  # the run is under way: what it did so far, then what it does
        note = fit.message(cfg.task.max_prompt_length)
        if note is not None and cfg.run.progress:
            progress.log(note)
        elif note is not None:
            print(f"asyncrl: {note}", file=sys.stderr)
        eval_problems = fit.eval[: cfg.eval.n_problems]
        session = cls(cfg, run_dir, model, tokenizer, task, fit.train, eval_problems,
                      MetricsWriter(run_dir, open_trackers(cfg.run.report_to, run_dir, cfg, step), after_step=step),
                      progress,
                      ledger=Ledger(run_dir, after_step=step), resume=resume, policy_dir=policy_dir,
                      monitor=EssMonitor(cfg.trainer.ess_warning), rewards=rewards,
                      completions=CompletionLog(run_dir, cfg.run.log_completions_every, cfg.trainer.steps, step),
                      prompt_counts=fit.counts(), lock=lock)
        if resume is not None:
            session._restore(resume.run_state["session"])
        return session

    def _restore(self, state: dict) -> None:
        self.eval_history = [(int(s), float(a)) for s, a in state["eval_history"]]
        self.answer_acc_history = [(int(s), float(a)) for s, a in state.get("answer_acc_history", [])]
        self.eval_time_s = float(state["eval_time_s"])
        self.started = time.time() - float(state["elapsed_s"])  # wall time continues the run's
        self.train_wall_prior_s = float(state["train_wall_s"])
        if "ess_monitor" in state:
            self.monitor.load_state_dict(state["ess_monitor"])
        set_global_rng_state(self.resume.trainer_state["global_rng"])

    def state_dict(self) -> dict:
        return {"eval_history": [[s, a] for s, a in self.eval_history],
                "answer_acc_history": [[s, a] for s, a in self.answer_acc_history], "eval_time_s": self.eval_time_s,
                "elapsed_s": self.elapsed_s(), "train_wall_s": self.train_wall_s(),
                "ess_monitor": self.monitor.state_dict()}

    def start_clock(self) -> None:
        """The training loop starts now (after the step-0 evaluation and the workers' start-up)."""
        self._clock = (time.perf_counter(), self.eval_time_s)

    def train_wall_s(self) -> float:
        """Seconds of the training loop over the whole run (resumes included), evaluations excluded."""
        if self._clock is None:
            return self.train_wall_prior_s
        started, eval_before = self._clock
        return self.train_wall_prior_s + time.perf_counter() - started - (self.eval_time_s - eval_before)

    def evaluate(self, step: int) -> float:
        """Evaluate now; returns ``eval_reward`` (every eval metric, pass@k too: :attr:`last_eval`)."""
        t0 = time.perf_counter()
        if step == 0 and self.cfg.eval.cache_initial:
            self.last_eval = self._initial_eval_cached()
        else:
            self.last_eval, _ = eval_metrics(self.model, self.tokenizer, self.task, self.eval_problems, self.cfg,
                                             rewards=self.rewards)
        acc = self.last_eval["eval_reward"]
        self.eval_history.append((step, acc))
        if "eval_answer_acc" in self.last_eval:
            self.answer_acc_history.append((step, self.last_eval["eval_answer_acc"]))
        if step > 0:
            self.eval_time_s += time.perf_counter() - t0
        else:  # before training: its own row, so curves start where the policy started
            self.metrics.write(0, {**self.last_eval, "elapsed_s": self.elapsed_s()})
        return acc

    def _initial_eval_cached(self) -> dict[str, float]:
        """The step-0 metrics from the cache (eval.cache_initial), computed and stored on a miss."""
        path = cache_path(self.cfg, initial_eval_key(self.cfg, self.model, self.eval_problems))
        cached = load_cached_eval(path)
        if cached is not None:
            return cached
        metrics, _ = eval_metrics(self.model, self.tokenizer, self.task, self.eval_problems, self.cfg,
                                  rewards=self.rewards)
        store_cached_eval(path, metrics)
        return metrics

    def elapsed_s(self) -> float:
        """Seconds on the run's clock: since the session opened (a resumed run's continues)."""
        return time.time() - self.started

    def finish_step(self, step: int, record: dict, batch, trainer, source, totals) -> None:
        """Everything after a training step: eval if due, metrics, ledger, progress, checkpoint if due."""
        if self.eval_due(step):
            self.evaluate(step)
            record.update(self.last_eval)
        record["elapsed_s"] = self.elapsed_s()
        if self.rewards is not None:  # reward/<function>: each function's mean raw value this step
            record.update(self.rewards.metrics(batch.reward_parts))
        action = self.monitor.update(step, record.get("ess_frac", math.nan))
        if action is not None:
            record["ess_warning"] = 1
            self.progress.log(f"ESS warning at step {step}: ESS fraction below "
                              f"{self.cfg.trainer.ess_warning.threshold} for {self.cfg.trainer.ess_warning.window} "
                              f"steps (action: {action})")
            if action == "rollback":
                record["ess_rollback_to"] = self.rollback(step, trainer, source)
        self.metrics.write(step, record)
        if self.completions.due(step):
            self.completions.write(step, batch, self.tokenizer, self.metrics)
        self.ledger.write(step, batch.group_ids.unique().tolist(), source.take_dropped_groups())
        self.progress.step(step, record, ess_warning=action is not None)
        if self.checkpoint_due(step) or action == "stop":
            self.checkpoint(step, trainer, source, totals)
        if action == "stop":
            raise EssStop(step)

    def rollback(self, step: int, trainer, source) -> int:
        """The ESS warning's ``rollback``: the trainer's weights and optimizer from the newest checkpoint
        saved before the ESS fell (the version counter moves on, so workers pull them); the data
        stream goes on. Returns the checkpoint's step (-1: none that old, nothing done)."""
        from safetensors.torch import load_file

        from asyncrl.training.checkpoint import load_states, step_dirs

        older = [(s, p) for s, p in step_dirs(self.run_dir) if s < self.monitor.first_low_step(step)]
        if not older:
            self.progress.log("ESS rollback: no checkpoint from before the ESS fell; going on")
            return -1
        ckpt_step, path = older[-1]
        self.model.load_state_dict(load_file(path / "model.safetensors"), strict=False)
        trainer_state, _ = load_states(path)
        trainer.load_optimizer_state(trainer_state["optimizer"])
        trainer.version += 1
        source.publish(trainer.model, trainer.version)
        return ckpt_step

    def _due(self, step: int, every: int) -> bool:
        """Every ``every`` steps (0 = never) and always at the last step."""
        return step == self.cfg.trainer.steps or (every > 0 and step % every == 0)

    def eval_due(self, step: int) -> bool:
        return self._due(step, self.cfg.eval.every)

    def checkpoint(self, step: int, trainer, source, totals) -> Path:
        """Save step ``step``: the model, the trainer, the source and this session (resumable)."""
        self.metrics.flush()
        self.ledger.flush()
        self.completions.flush()
        run_state = {"source": source.state_dict(), "session": self.state_dict(), "totals": totals.state_dict()}
        return save_checkpoint(self.run_dir, step, self.model, self.tokenizer, trainer.state_dict(), run_state,
                               keep=self.cfg.run.keep_checkpoints, write_shards=trainer.write_shards,
                               shard_bytes=trainer.shard_bytes())

    def checkpoint_due(self, step: int) -> bool:
        return self._due(step, self.cfg.run.checkpoint_every)

    def close(self) -> None:
        """Close the row files and trackers and release the run directory's lock."""
        self._close_files()
        self.release()

    def _close_files(self) -> None:
        self.metrics.close()
        self.ledger.close()
        self.completions.close()

    def release(self) -> None:
        """Let another process write this run directory (a resume): the run is over."""
        if self.lock is not None:
            self.lock.release()

    def finish(self, steps: int, extra: dict, train_wall_s: float | None = None) -> dict:
        """Write ``summary.json`` (atomically, last: a run with one is finished) and return it.
        ``train_wall_s``: seconds of the training loop, evaluations after step 0 excluded."""
        self._close_files()  # the lock is released last, once summary.json and the report exist
        summary = {
            "mode": self.cfg.run.mode,
            "loss": self.cfg.loss.name,
            "prox": self.cfg.trainer.prox,
            "seed": self.cfg.run.seed,
            "steps": steps,
            "initial_eval_reward": self.eval_history[0][1] if self.eval_history else None,
            "final_eval_reward": self.eval_history[-1][1] if self.eval_history else None,
            "eval_history": self.eval_history,
            "initial_eval_answer_acc": self.answer_acc_history[0][1] if self.answer_acc_history else None,
            "final_eval_answer_acc": self.answer_acc_history[-1][1] if self.answer_acc_history else None,
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
        summary.update(self.monitor.summary())
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
