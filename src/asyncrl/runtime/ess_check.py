"""The ESS early warning after each step (``trainer.ess_warning``, :mod:`asyncrl.stability.monitor`):
when the ESS fraction stayed low for a window of steps it warns, and then, per its action, goes on,
rolls the trainer back to the newest checkpoint from before the ESS fell, or stops the run."""

from __future__ import annotations

import math

from asyncrl.runtime.session import Session
from asyncrl.stability.monitor import EssMonitor
from asyncrl.config import ConfigError
from asyncrl.training.checkpoint import (DamagedCheckpoint, NonFiniteCheckpoint, UnsafeCheckpoint,
                                       check_checkpoint, step_dirs)


class EssCheck:
    """Feeds each step's ESS fraction to the monitor and carries out what it asks."""

    def __init__(self, session: Session):
        self.session = session  # the run directory's checkpoints, the model, the progress log
        self.monitor = EssMonitor(session.cfg.trainer.ess_warning)

    def after_step(self, step: int, record: dict, trainer, source) -> str | None:
        """The warning's action after ``step`` (``warn``, ``rollback``, ``stop``) or None; a warning
        and a rollback are marked in the step's record (``ess_warning``, ``ess_rollback_to``)."""
        action = self.monitor.update(step, record.get("ess_frac", math.nan))
        if action is None:
            return None
        warning = self.session.cfg.trainer.ess_warning
        record["ess_warning"] = 1
        self.session.progress.log(f"ESS warning at step {step}: ESS fraction below {warning.threshold} for "
                                  f"{warning.window} steps (action: {action})")
        if action == "rollback":
            record["ess_rollback_to"] = self.roll_back(step, trainer, source)
        return action

    def roll_back(self, step: int, trainer, source) -> int:
        """The trainer's weights and optimizer from the newest checkpoint saved before the ESS fell
        (the version counter moves on, so that workers pull them); the data stream goes on.
        Returns the checkpoint's step (-1: none that old, nothing done)."""
        from safetensors.torch import load_file

        older = [(s, p) for s, p in step_dirs(self.session.run_dir) if s < self.monitor.first_low_step(step)]
        if not older:
            self.session.progress.log("ESS rollback: no checkpoint from before the ESS fell; going on")
            return -1
        ckpt_step, path = older[-1]
        try:  # every tensor read and checked before the trainer takes any (as a resume does)
            trainer_state, _ = check_checkpoint(path)
        except (DamagedCheckpoint, NonFiniteCheckpoint, UnsafeCheckpoint) as err:
            raise ConfigError("trainer.ess_warning",
                              f"ESS rollback: checkpoint {path} cannot be loaded ({err})") from None
        self.session.model.load_state_dict(load_file(path / "model.safetensors"), strict=False)
        trainer.load_optimizer_state(trainer_state["optimizer"])
        trainer.version += 1
        source.publish(trainer.model, trainer.version)
        return ckpt_step

    def summary(self) -> dict:
        return self.monitor.summary()

    def state_dict(self) -> dict:
        return {"ess_monitor": self.monitor.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        if "ess_monitor" in state:  # checkpoints from before the warning existed have none
            self.monitor.load_state_dict(state["ess_monitor"])
