"""Built-in environments that need no state of their own."""

from __future__ import annotations

__all__ = ["FinalAnswer"]


class FinalAnswer:
    """The episode ends at the first assistant turn that calls no tool: that turn is the answer,
    scored by the reward functions (``env.tools`` without ``env.name``). No per-turn reward."""

    def reset(self, row: dict):
        return row["prompt"]

    def step(self, action: str):
        return "", 0.0, True, {}
