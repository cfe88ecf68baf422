"""Trainer-side stability for stale data (VCPO and what builds on it): the ESS-scaled learning rate,
the off-policy optimal baseline, the ESS early warning and the ESS-governed staleness window.

The math (``ess``, ``ess_lr_scale``, ``opob_baseline``) lives in :mod:`asyncrl.objectives.vcpo`;
this package is the machinery that applies it to a model, an optimizer and a run."""

from asyncrl.stability.adaptive import AdaptiveWindow
from asyncrl.stability.config import AdaptiveStalenessConfig, EssWarningConfig, VcpoConfig
from asyncrl.stability.monitor import EssMonitor

__all__ = ["AdaptiveStalenessConfig", "AdaptiveWindow", "EssMonitor", "EssWarningConfig", "VcpoConfig"]
