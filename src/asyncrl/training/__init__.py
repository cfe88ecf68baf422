"""Machinery over one model, in one process: the :class:`~asyncrl.training.trainer.Learner` (one
training step), the parts of its step, the frozen reference policy, the learning-rate schedule,
evaluation, the warm start (pretraining), checkpoints and export.

The training loop that drives them lives in :mod:`asyncrl.runtime`; the math they call lives in
:mod:`asyncrl.objectives`. This package imports nothing at import time.
"""
