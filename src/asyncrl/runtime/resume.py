"""Resuming a run: which checkpoint, with which configuration, and which changes are allowed.

A resumed run continues from the newest complete checkpoint of its run directory with the
configuration saved there (``config.yaml``). Settings that only change how long the run goes on,
how often it evaluates or saves, or how it reports may change on resume (:data:`MUTABLE`);
anything else would make the resumed run a different experiment and is refused with one line.

Every file of the checkpoint is read before it is trusted: a damaged one (torn, truncated, a file
missing) is set aside with a one-line warning and the next older one is used; one whose weights or
optimizer state hold NaN or inf (or a negative second moment) is refused in one line, as is one
whose optimizer shards' metadata names anything a checkpoint's metadata does not hold
(:mod:`asyncrl.distributed.dcp_reader`: a crafted pickle is never unpickled).

Files that :func:`asyncrl.train` wrote under ``.inputs/`` and the saved configuration names (pickled
functions among them) are checked against the content hash in their names before the configuration
is loaded (:mod:`asyncrl.runtime.saved_inputs`).

A checkpoint must also fit the run (:func:`check_fits`): its ``fingerprint.json`` (architecture,
tokenizer, loss, LoRA: :mod:`asyncrl.training.fingerprint`) against the run's configuration and
starting weights, before anything is loaded or written; a difference is refused in one line naming
it. A checkpoint written before fingerprints existed resumes with a one-line warning.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from asyncrl.core.user_code import first_line
from asyncrl.training.checkpoint import (
    CHECKPOINTS,
    DamagedCheckpoint,
    NonFiniteCheckpoint,
    UnsafeCheckpoint,
    check_checkpoint,
    set_aside,
    step_dirs,
)
from asyncrl.config import Config, ConfigError, load_config
from asyncrl.runtime.validate import load_run_config
from asyncrl.core.loader import parse_override
from asyncrl.runtime.saved_inputs import check_saved_inputs
from asyncrl.training.fingerprint import difference, folder_fingerprint, read_fingerprint
from asyncrl.training.lr_schedule import check_schedule

# dotted keys (or key prefixes ending in ".") that a resumed run may change
MUTABLE = ("trainer.steps", "eval.every", "eval.batch_size", "run.checkpoint_every", "run.keep_checkpoints",
           "run.checkpoint_on_signal", "run.progress", "run.tensorboard", "run.report_to",
           "run.log_completions_every", "run.log_episodes_every", "run.print_completions", "run.report",
           "run.resume", "run.out_dir", "run.name", "async.worker_start_timeout_s", "policy.torch_threads",
           "policy.cache_dir",
           "async.snapshots_on_host", "async.gpus_per_worker", "async.worker_timeout_s", "reward.timeout_s",
           "trainer.fsdp.timeout_s")


@dataclass
class Resume:
    """A checkpoint to continue from: its folder, step and the states it holds."""

    checkpoint: Path
    trainer_state: dict  # optimizer, trainer RNG, version, step, global RNGs (see asyncrl.training.checkpoint)
    run_state: dict  # "source", "session", "totals"

    @property
    def step(self) -> int:
        return int(self.trainer_state["step"])

    @property
    def version(self) -> int:
        return int(self.trainer_state["version"])

    @property
    def source_state(self) -> dict:
        return self.run_state["source"]

    def announcement(self, total_steps: int) -> str:
        """The one line a resumed run starts with (stderr)."""
        return f"resuming from step {self.step} of {total_steps} ({self.checkpoint})"


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _mutable(key: str) -> bool:
    return any(key == m or (m.endswith(".") and key.startswith(m)) for m in MUTABLE)


def check_compatible(cfg: Config, run_dir: Path) -> None:
    """Refuse (one line naming the key) a configuration that differs from the saved one in a
    setting that changes the run's meaning."""
    saved_path = run_dir / "config.yaml"
    if not saved_path.is_file():
        raise ConfigError("run.resume", f"cannot read the saved configuration {saved_path}: no such file")
    # Loading it imports and unpickles what it names: run.resume=auto comes here without resume_config
    check_saved_inputs(saved_path)
    # Loaded, not read raw: a key added to asyncrl after the run was saved compares at its default.
    saved = _flatten(load_config(saved_path).to_dict())
    now = _flatten(cfg.to_dict())
    for key in sorted(set(saved) | set(now)):
        if not _mutable(key) and saved.get(key) != now.get(key):
            raise ConfigError(key, f"differs from the run being resumed ({saved.get(key)!r} in {saved_path}, "
                                   f"now {now.get(key)!r}); only {', '.join(MUTABLE)} may change on resume")


def find_resume(cfg: Config, run_dir: Path) -> Resume | None:
    """The checkpoint ``cfg`` resumes from (None: start a new run), per ``run.resume``."""
    mode = cfg.run.resume
    # what a run leaves behind (a bench runner may have put its own log there first)
    has_run = any((run_dir / name).exists() for name in ("config.yaml", "metrics.jsonl", "summary.json", CHECKPOINTS))
    if mode == "no":
        if has_run:
            # TRL's output_dir is written over; a run here is never: say how to go on instead
            raise ConfigError("run.name", f"run directory already exists: {run_dir}, and runs are not "
                                          f"overwritten: continue it with run.resume=auto (or `asyncrl train "
                                          f"--resume {run_dir}`), or start a new one with run.name=<new name> "
                                          f"(or no run.name: a new timestamped one)")
        return None
    if not step_dirs(run_dir):
        if mode == "must":
            raise ConfigError("--resume", f"no complete checkpoint in {run_dir / 'checkpoints'}")
        return None  # auto: nothing to resume, start the run
    check_compatible(cfg, run_dir)
    checkpoint, trainer_state, run_state, damaged = _intact_checkpoint(run_dir)
    if "scheduler" in trainer_state:  # a longer decaying lr schedule: refused before anything is written
        check_schedule(cfg.trainer, trainer_state)
    resume = Resume(checkpoint, trainer_state, run_state)
    if resume.step >= cfg.trainer.steps and (run_dir / "summary.json").exists():
        raise ConfigError("trainer.steps", f"the run already finished {resume.step} steps; "
                                           f"raise trainer.steps to continue it")
    _set_aside_damaged(run_dir, damaged, checkpoint)  # the run goes on: only now is anything moved
    return resume


def _intact_checkpoint(run_dir: Path) -> tuple[Path, dict, dict, list[tuple[Path, str]]]:
    """The newest checkpoint whose every file reads back, its states, and the damaged newer ones
    with what is wrong with each. Non-finite weights are refused, not skipped: no kill leaves
    them, and falling back to an older checkpoint would hide them."""
    damaged: list[tuple[Path, str]] = []
    for _, checkpoint in reversed(step_dirs(run_dir)):
        try:
            trainer_state, run_state = check_checkpoint(checkpoint)
        except NonFiniteCheckpoint as err:
            raise ConfigError("--resume", f"checkpoint {checkpoint} holds {err.what} ({err}); "
                                          "refusing to resume from it") from None
        except UnsafeCheckpoint as err:  # crafted, not torn: refused like non-finite weights, not skipped
            raise ConfigError("--resume", f"refusing to resume from checkpoint {checkpoint}: {err}") from None
        except DamagedCheckpoint as err:
            damaged.append((checkpoint, str(err)))
            continue
        return checkpoint, trainer_state, run_state, damaged
    reasons = "; ".join(f"{path.name}: {why}" for path, why in damaged)
    raise ConfigError("--resume", f"no intact checkpoint in {run_dir / CHECKPOINTS} ({reasons})")


def _set_aside_damaged(run_dir: Path, damaged: list[tuple[Path, str]], used: Path) -> None:
    """Move damaged checkpoints out of the rolling set (one warning line each): counted as kept,
    one would make the next save prune the intact checkpoint this run resumes from."""
    for path, why in damaged:
        aside = set_aside(run_dir, path)
        print(f"asyncrl: checkpoint {path} is damaged ({why}); moved to {aside.name}, resuming from the "
              f"older {used.name}", file=sys.stderr, flush=True)


def check_fits(cfg: Config, resume: Resume, policy_dir: Path) -> None:
    """Refuse (one line naming the difference) a checkpoint made for another model, tokenizer, loss or
    LoRA than this run of ``cfg`` starting from ``policy_dir``; warn once for one without a fingerprint."""
    saved = read_fingerprint(resume.checkpoint)
    if saved is None:
        print(f"asyncrl: checkpoint {resume.checkpoint} has no fingerprint.json (written by an older asyncrl); "
              f"resuming without checking that it fits this run", file=sys.stderr, flush=True)
        return
    try:
        now = folder_fingerprint(cfg, policy_dir)
    except Exception as err:  # noqa: BLE001 (transformers' error for an unreadable folder varies)
        field = "policy.model_path" if cfg.policy.model_path else "policy.cache_dir"
        raise ConfigError(field, f"cannot read the model config or tokenizer of {policy_dir}: "
                                 f"{first_line(err, 300)}") from None
    found = difference(saved, now)
    if found:
        raise ConfigError("--resume", f"checkpoint {resume.checkpoint} was written for {found}; to start a new "
                                      f"run from its weights deliberately use policy.model_path={resume.checkpoint}")


def resume_config(run_dir: str | Path, overrides: list[str]) -> Config:
    """The configuration of ``asyncrl train --resume RUN_DIR [overrides]``: the saved one, the run
    directory itself, and the overrides (each must be in :data:`MUTABLE`)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ConfigError("--resume", f"not a run directory (no config.yaml): {run_dir}")
    for text in overrides:
        key = ".".join(parse_override(text)[0])
        if not _mutable(key):
            raise ConfigError(key, f"cannot change on resume; only {', '.join(MUTABLE)} may")
    check_saved_inputs(run_dir / "config.yaml")  # before loading it imports and unpickles what it names
    return load_run_config(run_dir / "config.yaml", [*overrides, f"run.out_dir={run_dir.parent}",
                                                      f"run.name={run_dir.name}", "run.resume=must"])
