"""``asyncrl plan``: a configuration's memory and time on paper, before it runs. A side product,
apart from the training path: nothing in training imports it.

:mod:`asyncrl.plan.estimate` holds the arithmetic, :mod:`asyncrl.plan.gpus` every GPU of a job,
:mod:`asyncrl.plan.layouts` the layouts of N GPUs and the one chosen; :mod:`asyncrl.plan.cli` the command.
"""
