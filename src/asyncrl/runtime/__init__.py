"""Runtime: the one training loop (:func:`train`) and the batch sources, engines and weight
channels it connects."""

from asyncrl.runtime.loop import train

__all__ = ["train"]
