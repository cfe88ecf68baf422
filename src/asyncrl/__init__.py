"""asyncrl: asynchronous RL post-training of language models.

``asyncrl.train(config, reward_funcs=[...], train_dataset=ds, **overrides)`` trains from Python
(asyncrl.api, docs/python-api.md); ``import asyncrl`` itself stays light: the API module, and
torch with it, load on first use.
"""
__version__ = "0.1.0"

__all__ = ["__version__", "train"]


def __getattr__(name: str):
    if name == "train":  # loaded on first use: `import asyncrl` stays light (no torch)
        from importlib import import_module

        return import_module("asyncrl.api").train
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")
