"""What every training mode shares: policy loading, the run directory, evaluation, checkpoints and
the summary. The loops (sync, async, simulated) differ only in where batches come from."""

from __future__ import annotations

import json
import resource
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import torch
import yaml

from asyncrl.checkpoint import save_checkpoint
from asyncrl.config import Config, ConfigError
from asyncrl.evaluation import eval_engine, evaluate
from asyncrl.metrics import MetricsWriter
from asyncrl.policy.lora import apply_lora
from asyncrl.policy.model import check_device, load_policy_for, set_deterministic
from asyncrl.pretrain import is_complete, pretrain, pretrained_dir
from asyncrl.progress import TrainProgress
from asyncrl.tasks import Problem, Task


def resolve_policy_dir(cfg: Config, log=print) -> Path:
    """``policy.model_path`` if set, else the cached warm start (built on first use)."""
    if cfg.policy.model_path:
        return Path(cfg.policy.model_path)
    path = pretrained_dir(cfg)
    if not is_complete(path):
        log(f"warm start not cached; running `asyncrl pretrain` ({cfg.pretrain.steps} steps) → {path}")
        pretrain(cfg)
    return path


def device_name(device: str) -> str:
    """What the run ran on, for summaries and reports ("cpu", or the GPU's name)."""
    if torch.device(device).type == "cuda" and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(device))
    return torch.device(device).type


def make_run_dir(cfg: Config) -> Path:
    name = cfg.run.name or (f"{cfg.run.mode}-{cfg.loss.name}-s{cfg.run.seed}-"
                            f"{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    run_dir = Path(cfg.run.out_dir) / name
    if (run_dir / "summary.json").exists():
        raise ConfigError("run.name", f"run directory already holds a finished run: {run_dir}")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return run_dir


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
    eval_time_s: float = 0.0  # evaluation seconds after step 0 (excluded from train_wall_s)

    @classmethod
    def open(cls, cfg: Config) -> "Session":
        check_device(cfg.policy.device)
        set_deterministic(cfg.run.deterministic)
        torch.manual_seed(cfg.run.seed)
        progress = TrainProgress(cfg.trainer.steps, f"{cfg.run.mode}/{cfg.loss.name}",
                                 enabled=cfg.run.progress)
        task = cfg.task.build()
        policy_dir = resolve_policy_dir(cfg, log=progress.log if cfg.run.progress else (lambda m: None))
        model, tokenizer = load_policy_for(cfg.policy, policy_dir)
        model = apply_lora(model, cfg.policy)  # trainer side only: workers load the plain base model
        run_dir = make_run_dir(cfg)
        eval_problems = task.problems("eval")[: cfg.eval.n_problems]
        return cls(cfg, run_dir, model, tokenizer, task, task.problems("train"), eval_problems,
                   MetricsWriter(run_dir, cfg.run.tensorboard), progress)

    def evaluate(self, step: int) -> float:
        t0 = time.perf_counter()
        ev = self.cfg.eval
        engine = eval_engine(self.model, self.tokenizer, max_new_tokens=self.cfg.rollout.max_new_tokens,
                             temperature=ev.temperature, seed=self.cfg.run.seed)
        acc = evaluate(engine, self.tokenizer, self.task, self.eval_problems, batch_size=ev.batch_size,
                       samples=ev.samples, chat_template=self.cfg.policy.chat_template)
        self.eval_history.append((step, acc))
        if step > 0:
            self.eval_time_s += time.perf_counter() - t0
        return acc

    def finish_step(self, step: int, record: dict, trainer) -> None:
        """Everything after a training step: eval if due, metrics, progress, checkpoint if due."""
        if self.eval_due(step):
            record["eval_reward"] = self.evaluate(step)
        record["elapsed_s"] = time.time() - self.started
        self.metrics.write(step, record)
        self.progress.update(step, reward=record.get("reward_mean"), eval_acc=record.get("eval_reward"),
                             tokens_per_s=record.get("throughput_tokens_per_s"))
        if self.checkpoint_due(step):
            self.checkpoint(step, trainer.state_dict())

    def _due(self, step: int, every: int) -> bool:
        """Every ``every`` steps (0 = never) and always at the last step."""
        return step == self.cfg.trainer.steps or (every > 0 and step % every == 0)

    def eval_due(self, step: int) -> bool:
        return self._due(step, self.cfg.eval.every)

    def checkpoint(self, step: int, trainer_state: dict) -> None:
        save_checkpoint(self.run_dir / "checkpoint", self.model, self.tokenizer, trainer_state, step)

    def checkpoint_due(self, step: int) -> bool:
        return self._due(step, self.cfg.run.checkpoint_every)

    def finish(self, steps: int, extra: dict, train_wall_s: float | None = None) -> dict:
        """Write ``summary.json`` (atomically, last: a run with one is finished) and return it.
        ``train_wall_s``: seconds of the training loop, evaluations after step 0 excluded."""
        self.metrics.close()
        summary = {
            "mode": self.cfg.run.mode,
            "loss": self.cfg.loss.name,
            "prox": self.cfg.trainer.prox,
            "seed": self.cfg.run.seed,
            "steps": steps,
            "initial_eval_reward": self.eval_history[0][1] if self.eval_history else None,
            "final_eval_reward": self.eval_history[-1][1] if self.eval_history else None,
            "eval_history": self.eval_history,
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
        summary.update(extra)
        tmp = self.run_dir / "summary.json.tmp"
        tmp.write_text(json.dumps(summary, indent=2))
        tmp.rename(self.run_dir / "summary.json")
        return summary
