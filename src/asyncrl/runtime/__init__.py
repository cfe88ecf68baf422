"""Runtime: the one training loop (:func:`train`) and the batch sources, engines and weight
channels it connects. ``import asyncrl.runtime`` itself stays light (a rollout worker's first
module, :mod:`asyncrl.runtime.worker_entry`, must import nothing slow): the loop, and torch with
it, load on first use of ``train``."""

__all__ = ["train"]


def __getattr__(name: str):
    if name == "train":
        from importlib import import_module

        return import_module("asyncrl.runtime.loop").train
    raise AttributeError(f"module 'asyncrl.runtime' has no attribute {name!r}")
