"""Rollout: which prompts to sample next, how to generate completions, how to score them."""

from asyncrl.rollout.engine import TransformersEngine
from asyncrl.rollout.prompts import PromptStream
from asyncrl.rollout.scoring import score

__all__ = ["PromptStream", "TransformersEngine", "score"]
