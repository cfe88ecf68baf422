"""asyncrl: asynchronous RL post-training of language models.

``asyncrl.train(config, reward_funcs=[...], train_dataset=ds, **overrides)`` trains from Python, and
``asyncrl.Trainer(...)`` is the same run as an object (``peft_config``, ``callbacks``, ``.train()``;
asyncrl.api, docs/python-api.md); ``import asyncrl`` itself stays light: the API module, and torch
with it, load on first use.
"""
__version__ = "0.1.0"

# what asyncrl.api offers here too: the API and its exception family (docs/python-api.md, "Errors")
_API = ("train", "Trainer", "AsyncRLError", "CallbackError", "ConfigError", "EnvError", "Interrupted", "RankLost",
        "RewardFunctionError", "WorkerError")

__all__ = [*_API, "__version__"]


def __getattr__(name: str):
    if name in _API:  # loaded on first use: `import asyncrl` stays light (no torch)
        from importlib import import_module

        return getattr(import_module("asyncrl.api"), name)
    raise AttributeError(f"module 'asyncrl' has no attribute {name!r}")
