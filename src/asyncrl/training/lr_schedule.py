"""The learning-rate schedule over training steps (``trainer.lr_schedule``, docs/training.md).

Step k (1-based, as in ``metrics.jsonl``) of T = ``trainer.steps`` with W = ``warmup_steps`` and
m = ``min_lr_ratio`` trains at ``lr · factor(k)``:

    k <= W:  k / W                                  linear warm-up from 0 (step 1 already moves)
    k >  W:  m + (1 − m) · shape(p),  p = (k − W − 1) / (T − W) in [0, 1)

with shape(p) = 1 (constant), 1 − p (linear) or (1 + cos πp) / 2 (cosine): the first step after
the warm-up trains at the full lr and the decay would reach m at step T + 1, so no step of the run
has a zero learning rate (the trainer refuses one). The decay part is that of transformers'
``get_linear_schedule_with_warmup`` / ``get_cosine_schedule_with_warmup`` evaluated at k − 1.

The factor is applied through ``torch.optim.lr_scheduler.LambdaLR``, stepped once per training
step (all ``n_minibatches`` updates of a step share one lr); its state goes into checkpoints.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from asyncrl.core.loader import ConfigError
from asyncrl.core.registry import Registry

# trainer.lr_schedule -> the decay's shape(p), p in [0, 1)
SHAPES: Registry[Callable[[float], float]] = Registry("trainer.lr_schedule", {
    "constant": lambda p: 1.0,
    "linear": lambda p: 1.0 - p,
    "cosine": lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
})


def lr_factor(step: int, *, total: int, warmup: int, shape: str, min_ratio: float) -> float:
    """The multiplier of the base lr at 1-based training step ``step`` (see the module docstring)."""
    if step <= warmup:
        return step / warmup
    progress = min(1.0, (step - warmup - 1) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * SHAPES.lookup(shape)(progress)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR of ``cfg`` (a TrainerConfig); its epoch counts finished training steps, so the lr
    set after ``n`` calls of ``step()`` is that of training step ``n + 1``."""
    def factor(done: int) -> float:
        return lr_factor(done + 1, total=cfg.steps, warmup=cfg.warmup_steps, shape=cfg.lr_schedule,
                         min_ratio=cfg.min_lr_ratio)

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def schedule_key(cfg) -> list:
    """What the schedule's lr values depend on beyond the step: saved with the scheduler so a resume
    that would bend the curve (e.g. a longer ``trainer.steps`` under a decaying schedule) is refused."""
    horizon = cfg.steps if cfg.lr_schedule != "constant" else None
    return [cfg.lr_schedule, cfg.warmup_steps, float(cfg.min_lr_ratio), horizon]


def check_schedule(cfg, state: dict) -> None:
    """ConfigError unless a checkpoint's lr schedule is the one ``cfg`` would follow: under a decaying
    schedule a new ``trainer.steps`` would bend the lr curve of the steps still to come."""
    saved, now = list(state.get("schedule", schedule_key(cfg))), schedule_key(cfg)
    if saved != now:
        raise ConfigError("trainer.steps" if saved[:3] == now[:3] else "trainer.lr_schedule",
                          f"the checkpoint's lr schedule (kind, warmup, min ratio, horizon) {saved} differs "
                          f"from this run's {now}; a decaying schedule's length cannot change on resume")
