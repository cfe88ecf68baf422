"""Rollout: which prompts to sample next, how to generate completions, how to score them."""

from asyncrl.rollout.engine import ENGINES, Engine, EngineSpec, make_engine
from asyncrl.rollout.prompts import PromptStream
from asyncrl.rollout.scoring import score

__all__ = ["ENGINES", "Engine", "EngineSpec", "PromptStream", "make_engine", "score"]
