"""How a work unit of problems becomes a scored batch: the rollout seam, one per kind of episode.

- :class:`SingleTurn`: one prompt, one completion (encode, generate, score).
- ``asyncrl.agents.rollout.EpisodeRollout``: multi-turn episodes with tools and an environment
  (``env.name`` or ``env.tools`` set).

Both have ``run(engine, problems, n, *, between_chunks=None, first_group_id=0) -> RolloutOut``, and
every consumer (the sync and simulated sources, the rollout workers, evaluation) calls that alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from asyncrl.core.import_path import resolve
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout.scoring import score
from asyncrl.tasks import Problem
from asyncrl.types import Batch

__all__ = ["EPISODES", "RolloutOut", "SingleTurn", "make_rollout"]

# by import path: the episode rollout is built on this module's RolloutOut
EPISODES = "asyncrl.agents.rollout:EpisodeRollout"


@dataclass
class RolloutOut:
    """A scored batch (rows: problems × n, in order), the text of each row after its prompt, and
    the unit's episode statistics (None for single turns). ``failed_groups``: ids of the groups
    left out of the batch because an episode of theirs failed (an environment call that failed on
    its last try), for the ledger."""

    batch: Batch
    texts: list[str]
    stats: object | None = field(default=None)
    failed_groups: list[int] = field(default_factory=list)


class SingleTurn:
    def __init__(self, rewards, tokenizer, *, chat_template: bool, max_prompt_length: int | None):
        self.rewards, self.tokenizer = rewards, tokenizer
        self.chat_template, self.max_prompt_length = chat_template, max_prompt_length

    def run(self, engine, problems: list[Problem], n: int, *, between_chunks=None,
            first_group_id: int = 0, keep_failed: bool = False, stop_check=None) -> RolloutOut:
        prompts = encode_problems(self.tokenizer, problems, n, self.chat_template, self.max_prompt_length)
        gen = engine.generate(prompts, between_chunks=between_chunks)
        batch = score(gen, problems, n, self.rewards, self.tokenizer, first_group_id=first_group_id)
        texts = self.tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
        return RolloutOut(batch, texts)


def make_rollout(cfg, rewards, tokenizer):
    """The rollout of ``cfg`` (a Config) with ``rewards`` (a RewardSet) and ``tokenizer``: episodes
    when the run has an environment or tools, else single turns."""
    if cfg.env.episodes:
        return resolve(EPISODES)(cfg, rewards, tokenizer)
    return SingleTurn(rewards, tokenizer, chat_template=cfg.policy.chat_template,
                      max_prompt_length=cfg.task.truncate_to)
