"""Settings of the stability machinery: one small dataclass per component (defined in
asyncrl.config.parts, below every part), and the rules that span their sections."""

from __future__ import annotations

from asyncrl.config.parts import AdaptiveStalenessConfig, EssWarningConfig, VcpoConfig
from asyncrl.core.registries import MODES

__all__ = ["AdaptiveStalenessConfig", "EssWarningConfig", "VcpoConfig", "check_combinations"]


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
