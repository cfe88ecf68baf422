"""Settings of the stability machinery: one small dataclass per component."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from asyncrl.core.loader import setting
from asyncrl.core.registries import MODES


@dataclass
class VcpoConfig:
    """VCPO's trainer-side fixes (``trainer.vcpo``). Defaults are the VCPO authors'.

    enabled: scale each optimizer step's learning rate by the ESS rule
        lr · rule(min(1, ρ_ess / base_ess_ratio)), ρ_ess = ESS / B of the minibatch's sequence
        importance weights (behavior → current policy).
    opob: replace the group-mean baseline of the advantages by the off-policy optimal baseline
        b* = Σ w² ‖g‖² R / Σ w² ‖g‖² per prompt group (costs one extra forward and backward pass per
        sequence, to get each sequence's score-gradient norm ‖g‖).
    """

    enabled: bool = setting(False, "scale each update's learning rate by the ESS rule (VCPO)")
    base_ess_ratio: float = setting(1.0, "ρ_base: the on-policy reference ESS fraction")
    rule: Literal["sqrt", "linear"] = setting("sqrt", "lr factor: rule(min(1, ESS fraction / base_ess_ratio))")
    weight_cap: float = setting(0.0, '> 0: ESS of min(w, cap) (VCPO\'s "use_clipped"); 0 = unclipped weights')
    opob: bool = setting(False, "off-policy optimal baseline instead of the group mean (VCPO)")

    def validate(self) -> None:
        if not (math.isfinite(self.base_ess_ratio) and 0 < self.base_ess_ratio <= 1):
            raise ValueError("base_ess_ratio: must be in (0, 1]")
        if not (math.isfinite(self.weight_cap) and self.weight_cap >= 0):
            raise ValueError("weight_cap: must be a finite number >= 0 (0 = no cap)")
        if 0 < self.weight_cap < 1:
            raise ValueError("weight_cap: a cap below 1 would clip on-policy weights; use >= 1 or 0")


@dataclass
class EssWarningConfig:
    """ESS early warning (``trainer.ess_warning``): flags the run when the step's ESS fraction stays
    below ``threshold`` for ``window`` consecutive steps. ``action``: ``warn`` (flag only), ``stop``
    (checkpoint and end the run there), ``rollback`` (reload the newest checkpoint saved before the
    ESS fell, and go on with fresh data)."""

    threshold: float = setting(0.0, "flag a run whose ESS fraction stays below this; 0 = off")
    window: int = setting(3, "consecutive low-ESS steps that trigger the warning")
    action: Literal["warn", "stop", "rollback"] = setting(
        "warn", "warn: flag only; stop: checkpoint and end; rollback: reload the checkpoint before the fall")

    def validate(self) -> None:
        if not (math.isfinite(self.threshold) and 0 <= self.threshold <= 1):
            raise ValueError("threshold: must be an ESS fraction in [0, 1] (0 = off)")
        if self.window < 1:
            raise ValueError("window: must be >= 1")


@dataclass
class AdaptiveStalenessConfig:
    """ESS-governed look-ahead (``async.adaptive``), W = ``async.max_ahead`` moved by one per step:
    down (to 0) after a step whose ESS fraction is below ``lower_below``; up (to K =
    ``async.max_staleness``) after one in which the trainer waited for more than ``starved_frac`` of
    the step and the ESS fraction is above ``raise_above``; down (to ``min_window``) after one in
    which it did not wait. W settles at the smallest look-ahead that keeps the trainer fed."""

    enabled: bool = setting(False, "move async.max_ahead by one per step, governed by the ESS")
    lower_below: float = setting(0.5, "lower W after a step whose ESS fraction is below this")
    raise_above: float = setting(0.8, "raise W (trainer starved) only while the ESS fraction is above this")
    starved_frac: float = setting(0.05, 'the trainer "waited" when its batch wait exceeds this share of the step')
    min_window: int = setting(1, "the floor of W when the trainer is fed; only a low ESS takes W below it")

    def validate(self) -> None:
        for name in ("lower_below", "raise_above"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value <= 1):
                raise ValueError(f"{name}: must be an ESS fraction in [0, 1]")
        if self.lower_below > self.raise_above:
            raise ValueError("lower_below: must be <= raise_above")
        if not (math.isfinite(self.starved_frac) and 0 <= self.starved_frac < 1):
            raise ValueError("starved_frac: must be a share of the step in [0, 1)")
        if self.min_window < 0:
            raise ValueError("min_window: must be >= 0")


def check_combinations(cfg) -> None:
    """Cross-section rules (``cfg``: the whole Config); ValueError("section.key: message")."""
    if cfg.trainer.vcpo.opob and cfg.trainer.advantage not in ("grpo", "drgrpo"):
        raise ValueError(f"trainer.vcpo.opob: replaces the group-mean baseline of grpo/drgrpo; "
                         f"trainer.advantage={cfg.trainer.advantage!r} has a baseline of its own")
    if cfg.async_.adaptive.enabled and not MODES[cfg.run.mode].window:  # ModeEntry.window
        raise ValueError(f"async.adaptive: adapts the async look-ahead window; run.mode={cfg.run.mode!r} has none")
    if cfg.trainer.ess_warning.action == "rollback":
        if cfg.run.checkpoint_every <= 0:
            raise ValueError("trainer.ess_warning.action: rollback needs run.checkpoint_every > 0 "
                             "(the checkpoints it rolls back to)")
        if cfg.policy.lora_rank:
            raise ValueError("trainer.ess_warning.action: rollback is not supported with LoRA (policy.lora_rank)")
        keep, every, window = cfg.run.keep_checkpoints, cfg.run.checkpoint_every, cfg.trainer.ess_warning.window
        if keep and keep * every <= window:
            raise ValueError(f"run.keep_checkpoints: rollback needs a checkpoint from before the {window}-step "
                             f"low-ESS window; keep more than {window // every} (or 0 = all)")
