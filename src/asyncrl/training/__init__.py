"""Machinery over one model: the :class:`~asyncrl.training.trainer.Learner` (one
training step), the parts of its step, the frozen reference policy, the learning-rate schedule,
evaluation, the warm start (pretraining), checkpoints and export; and the same model trained by
several ranks: FSDP2 sharding (fsdp.py), each minibatch split over the ranks (data_parallel.py),
the optimizer's state written as shards (sharded_state.py).

The training loop that drives them lives in :mod:`asyncrl.runtime`; the math they call lives in
:mod:`asyncrl.objectives`. This package imports nothing at import time.
"""
