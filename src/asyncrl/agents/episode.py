"""Run a batch of episodes turn by turn: every live episode's next turn in one engine call, then
the tools or the environment, then the observation ids appended (docs/agents.md).

The row an episode trains on is built from ids only (:mod:`asyncrl.agents.render`):

    prompt ids | sampled ids (turn 1) | observation ids | sampled ids (turn 2) | ...
    versions:    v, v, v+1 ...       | −1 ...          | v+1, v+2 ...
    trained:     yes                 | no (attended)   | yes

Between turns the runner calls the engine's chunk hook (``between``), where an async worker pulls
newer weights: the episode goes on with them, and its later tokens carry their version. A turn
ends at eos, at one of the stop strings, or at ``env.turn_tokens``; an episode at ``done``,
``env.max_turns`` assistant turns, ``env.episode_tokens`` tokens, or an observation the chat
template cannot append (counted as a template break, ended rather than trained on rewritten ids).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from asyncrl.agents.env import env_reset, env_step
from asyncrl.agents.render import PrefixBroken
from asyncrl.agents.tools import parse_tool_calls
from asyncrl.tasks import Problem
from asyncrl.types import Generation

__all__ = ["Episode", "EpisodeLimits", "EpisodeRunner", "episodes_to_generation"]


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    turn_tokens: int
    episode_tokens: int
    stop: tuple[str, ...] = ()
    step_timeout_s: float | None = None


@dataclass
class Episode:
    """One episode as it grows: ids after the prompt with, per id, its behaviour log-prob, version
    (−1 for observations) and whether it was observed; the conversation for reward functions."""

    problem: Problem
    env: Any
    prompt_ids: list[int]
    messages: list[dict]  # the prompt's messages, then every turn after it
    ids: list[int] = field(default_factory=list)
    logps: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    observed: list[bool] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)  # the environment's, one per env step
    tool_calls: list[dict] = field(default_factory=list)
    info: dict = field(default_factory=dict)
    turns: int = 0
    n_prompt_messages: int = 0
    end: str | None = None  # why it ended: done, max_turns, episode_tokens, template
    env_time_s: float = 0.0

    @property
    def completion_messages(self) -> list[dict]:
        return self.messages[self.n_prompt_messages:]

    def add_sampled(self, ids: list[int], logps: list[float], versions: list[int]) -> None:
        self.ids += ids
        self.logps += logps
        self.versions += versions
        self.observed += [False] * len(ids)

    def add_observed(self, ids: list[int]) -> None:
        self.ids += ids
        self.logps += [0.0] * len(ids)
        self.versions += [-1] * len(ids)
        self.observed += [True] * len(ids)


class EpisodeRunner:
    """Plays episodes of ``env_factory`` environments with an engine. ``turns``: a
    :class:`~asyncrl.agents.render.ChatTurns` or ``PlainTurns``; ``tools``: a ToolBox or None."""

    def __init__(self, env_factory, turns, tokenizer, limits: EpisodeLimits, tools=None):
        self.env_factory, self.turns, self.tokenizer = env_factory, turns, tokenizer
        self.limits, self.tools = limits, tools
        self.template_warned = False

    def start(self, problem: Problem) -> Episode:
        env = self.env_factory()
        t0 = time.perf_counter()
        messages = env_reset(env, problem, self.limits.step_timeout_s)
        episode = Episode(problem, env, self.turns.prompt_ids(messages), list(messages),
                          n_prompt_messages=len(messages))
        episode.env_time_s += time.perf_counter() - t0
        return episode

    def run(self, engine, problems: list[Problem], n: int, between=None) -> list[Episode]:
        """``n`` episodes per problem (rows: problems × n, in order), each from its own environment
        reset with the same row: every member of a group starts from the same state."""
        episodes = [self.start(p) for p in problems for _ in range(n)]
        stops = tuple(dict.fromkeys([*self.limits.stop, *self._turn_end(),
                                     *getattr(episodes[0].env, "stop", ())])) if episodes else ()
        while live := [e for e in episodes if e.end is None]:
            gen = engine.generate([e.prompt_ids + e.ids for e in live], between_chunks=between,
                                  max_new_tokens=self.limits.turn_tokens, stop=stops)
            for row, episode in enumerate(live):
                self._sampled(episode, gen, row)
            for episode in live:
                if episode.end is None:
                    self._respond(episode)
            if between is not None and any(e.end is None for e in episodes):
                between()  # newer weights, if any, for the next turn
        return episodes

    def _turn_end(self) -> list[str]:
        """The template's end-of-turn token as a stop string when it is not eos (which always stops)."""
        end = getattr(self.turns, "end_of_turn", None)
        if end is None or end == self.tokenizer.eos_token_id:
            return []
        return [self.tokenizer.decode([end])]

    def _sampled(self, episode: Episode, gen: Generation, row: int) -> None:
        mask = gen.completion_mask[row]
        room = self.limits.episode_tokens - len(episode.ids)
        ids = gen.completion_ids[row][mask].tolist()[:room]
        episode.add_sampled(ids, gen.behav_logp[row][mask].tolist()[:room], gen.versions[row][mask].tolist()[:room])
        episode.turns += 1
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        episode.messages.append({"role": "assistant", "content": text})
        if len(episode.ids) >= self.limits.episode_tokens:
            episode.end = "episode_tokens"

    def _respond(self, episode: Episode) -> None:
        """The tools' results when the turn calls tools, else the environment's step; then the
        observation ids, unless the episode ends here."""
        text = episode.messages[-1]["content"]
        t0 = time.perf_counter()
        calls = parse_tool_calls(text) if self.tools is not None else []
        if calls:
            observation = self._call_tools(episode, calls)
        else:
            result = env_step(episode.env, episode.problem, text, self.limits.step_timeout_s)
            episode.rewards.append(result.reward)
            episode.info = result.info
            observation = result.messages
            if result.done:
                episode.end = "done"
        episode.env_time_s += time.perf_counter() - t0
        if episode.end is None and episode.turns >= self.limits.max_turns:
            episode.end = "max_turns"
        if episode.end is not None:
            return
        self._observe(episode, observation)

    def _call_tools(self, episode: Episode, calls: list) -> list[dict]:
        messages = []
        for call in calls:
            result = self.tools.call(call)
            episode.tool_calls.append({"name": result.name, "arguments": getattr(call, "arguments", None),
                                       "content": result.content, "failed": result.failed, "reason": result.reason})
            messages.append({"role": "tool", "content": result.content})
        return messages

    def _observe(self, episode: Episode, observation: list[dict]) -> None:
        try:
            ids = self.turns.observation_ids(observation, episode.ids[-1:])
        except PrefixBroken as err:
            if not self.template_warned:
                warnings.warn(f"asyncrl: {err}; episodes end at such a turn instead of training on rewritten "
                              "tokens (counted in episode/template_breaks)", stacklevel=2)
                self.template_warned = True
            episode.end = "template"
            return
        if len(episode.ids) + len(ids) >= self.limits.episode_tokens:
            episode.end = "episode_tokens"  # no room left to answer the observation
            return
        episode.add_observed(ids)
        episode.messages += observation


def episodes_to_generation(episodes: list[Episode], pad_id: int) -> Generation:
    """The episodes as one Generation: prompts left-padded, completions right-padded; the
    completion mask marks sampled ids (trained), the observation mask observed ids (attended)."""
    from asyncrl.policy.sampling import left_pad

    prompt_ids, prompt_mask = left_pad([e.prompt_ids for e in episodes], pad_id)
    rows, width = len(episodes), max([len(e.ids) for e in episodes] + [1])
    ids = torch.full((rows, width), pad_id, dtype=torch.long)
    logps = torch.zeros((rows, width), dtype=torch.float32)
    versions = torch.full((rows, width), -1, dtype=torch.long)
    observed = torch.zeros((rows, width), dtype=torch.bool)
    for i, e in enumerate(episodes):
        k = len(e.ids)
        ids[i, :k] = torch.tensor(e.ids, dtype=torch.long)
        logps[i, :k] = torch.tensor(e.logps, dtype=torch.float32)
        versions[i, :k] = torch.tensor(e.versions, dtype=torch.long)
        observed[i, :k] = torch.tensor(e.observed, dtype=torch.bool)
    return Generation(prompt_ids=prompt_ids, prompt_mask=prompt_mask.bool(), completion_ids=ids, behav_logp=logps,
                      versions=versions, completion_mask=(versions >= 0) & ~observed, observation_mask=observed)
