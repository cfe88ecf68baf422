"""Foundations every other part may use and none of which knows a component: the YAML loader and
its one-line :class:`~asyncrl.core.loader.ConfigError`, the registries of runtime parts, atomic
file writes, the user cache, the progress display, the figure helpers and the tokenizer loader.

This package imports nothing at import time, so ``asyncrl.core.<module>`` costs only that module.
"""
