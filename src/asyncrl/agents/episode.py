"""Play a batch of episodes, each at its own pace: the engine decodes whichever episodes are ready,
while the other episodes' environment and tool calls run (docs/agents.md, "The scheduler").

The row an episode trains on is built from ids only (:mod:`asyncrl.agents.render`):

    prompt ids | sampled ids (turn 1) | observation ids | sampled ids (turn 2) | ...
    versions:    v, v, v+1 ...       | −1 ...          | v+1, v+2 ...
    trained:     yes                 | no (attended)   | yes

The scheduler's loop (:class:`~asyncrl.agents.play.Play`): every episode's ``reset`` is submitted to a :class:`~asyncrl.agents.calls.CallPool`
at once; an episode whose prompt or observation is in joins the next engine call (``schedule=ready``:
one call for all the episodes ready now, never waiting for the slowest; ``rounds``: one call once
every live episode is ready, the lock-step order, reproducible to the bit); its turn's tool calls or
``step`` go to the pool again, and so on. Between engine calls, and every second while it waits on
calls, the runner calls the engine's chunk hook (``between``), where an async worker pulls newer
weights and sends its heartbeat: the episode goes on with them, and its later tokens carry their
version. A turn ends at eos, at one of the stop strings, or at ``env.turn_tokens``; an episode at
``done``, ``env.max_turns`` assistant turns, ``env.episode_tokens`` tokens in its row, a row that
fills the engine's context window (``max_model_len``: vLLM's, where the prompt and every turn
count; the engine would refuse the next request), or a call that failed on its last try
(``failed``: its group is dropped by the rollout).

A history that rewrites the past forks: when the chat template cannot append an observation to
the row's ids (it renders earlier turns differently once messages follow), or, with
``env.history=template``, when the template's rendering of the whole conversation does not begin
with the row (a template that drops earlier ``<think>`` blocks), the row so far is closed and a new
row of the same episode starts from the conversation as rendered. Every row trains on the
episode's reward and advantage (docs/agents.md, "Histories that rewrite the past").
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import torch

from asyncrl.agents.calls import CallPool, Failed
from asyncrl.agents.env import EnvError, Environment, check_reset, check_step, tool_functions
from asyncrl.agents.play import Play
from asyncrl.agents.render import PrefixBroken
from asyncrl.agents.tool_formats import FORMATS, ToolFormat
from asyncrl.tasks import Problem
from asyncrl.types import Generation

__all__ = ["Episode", "EpisodeLimits", "EpisodeRow", "observed_ids", "EpisodeRunner", "FailureWindow", "Scheduling", "episodes_to_generation"]

SCHEDULES = ("ready", "rounds")
HISTORIES = ("tokens", "template")


@dataclass(frozen=True)
class EpisodeLimits:
    max_turns: int
    turn_tokens: int
    episode_tokens: int
    stop: tuple[str, ...] = ()
    step_timeout_s: float | None = None


@dataclass(frozen=True)
class Scheduling:
    """How episodes share the engine and the environment (``env.schedule``, ``env.concurrency``,
    ``env.retries``, ``env.retry_backoff_s``, ``env.max_failure_frac``, ``env.failure_window``)."""

    schedule: str = "ready"
    concurrency: int = 256
    retries: int = 2
    backoff_s: float = 1.0
    max_failure_frac: float = 0.25
    failure_window: int = 100


class FailureWindow:
    """Failed episodes among the last ``size`` that ended. A run trains on while they stay at most
    ``max_frac`` × ``size`` (one timed-out container in a thousand is not worth a three-day run);
    past that the environment is broken rather than flaky: :class:`EnvError`, one line."""

    def __init__(self, size: int, max_frac: float):
        self.ended: deque[bool] = deque(maxlen=size)
        self.size, self.max_frac = size, max_frac

    def record(self, episode: "Episode") -> None:
        self.ended.append(episode.end == "failed")
        failed = sum(self.ended)
        if episode.end == "failed" and failed > self.max_frac * self.size:
            raise EnvError(episode.env, episode.problem,
                           f"{failed} of the last {len(self.ended)} episodes failed, more than env.max_failure_frac="
                           f"{self.max_frac:g} of env.failure_window={self.size}; the last: {episode.failure}")


@dataclass
class EpisodeRow:
    """One training row of an episode that a rewrite of its history split (:meth:`Episode.fork`):
    its prompt ids and, per id after them, behaviour log-prob, version, whether it was observed."""

    prompt_ids: list[int]
    ids: list[int]
    logps: list[float]
    versions: list[int]
    observed: list[bool]

    @property
    def sampled(self) -> int:
        return sum(1 for o in self.observed if not o)


@dataclass
class Episode:
    """One episode as it grows: ids after the prompt with, per id, its behaviour log-prob, version
    (−1 for observations) and whether it was observed; the conversation for reward functions.
    ``prompt_ids`` .. ``observed`` are the row it is growing now; a history the episode rewrote
    (a harness that summarised its context, a template that drops earlier thinking) closed the
    earlier rows into ``past_rows`` (:meth:`fork`)."""

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
    call_text: str = ""  # the last turn's text as its tool calls are parsed from (ToolFormat.keeps_special)
    # per assistant turn: its text, tokens, versions, then its tool calls or the environment's answer
    turn_log: list[dict] = field(default_factory=list)
    end: str | None = None  # why it ended: done, max_turns, episode_tokens, max_model_len, template, failed
    failure: str = ""  # what failed: "step raised KeyError: 'board' (try 3 of 3)"
    env_time_s: float = 0.0  # wall time its calls took, waiting included
    asked_at: float = 0.0  # when its pending calls were submitted
    started_at: float = field(default_factory=time.perf_counter)
    duration_s: float = 0.0  # wall time from its start to its end (set when it ends)
    past_rows: list[EpisodeRow] = field(default_factory=list)  # rows closed by forks, in order

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

    @property
    def context_ids(self) -> list[int]:
        """What the engine sees next: the current row's prompt and ids."""
        return self.prompt_ids + self.ids

    @property
    def forks(self) -> int:
        return len(self.past_rows)

    def fork(self, prompt_ids: list[int]) -> None:
        """Close the current row and start a new one whose prompt is ``prompt_ids``: the history
        as rewritten, which the row so far does not begin (token-in/token-out cannot append)."""
        self.past_rows.append(EpisodeRow(self.prompt_ids, self.ids, self.logps, self.versions, self.observed))
        self.prompt_ids, self.ids, self.logps, self.versions, self.observed = list(prompt_ids), [], [], [], []

    @property
    def rows(self) -> list[EpisodeRow]:
        """Its training rows, in order: the closed ones with a sampled token, then the current one
        (always kept, so that every episode has a row)."""
        now = EpisodeRow(self.prompt_ids, self.ids, self.logps, self.versions, self.observed)
        return [r for r in self.past_rows if r.sampled] + [now]


class EpisodeRunner:
    """Plays episodes of ``env_factory`` environments with an engine. ``turns``: a
    :class:`~asyncrl.agents.render.ChatTurns` or ``PlainTurns``; ``tools``: a ToolBox or None;
    ``scheduling``: how episodes share the engine and the environment."""

    def __init__(self, env_factory: Callable[[], Environment], turns, tokenizer, limits: EpisodeLimits, tools=None,
                 scheduling: Scheduling | None = None, tool_format: ToolFormat | None = None, history: str = "tokens"):
        self.env_factory, self.turns, self.tokenizer = env_factory, turns, tokenizer
        self.limits, self.tools = limits, tools
        if history not in HISTORIES:
            raise ValueError(f"history: {history!r} is not one of {', '.join(HISTORIES)}")
        self.history = history
        self.tool_format = tool_format or FORMATS["hermes"]
        # ids that end a turn rather than belong to a call: cut before a call's text is parsed
        self._special_ids = set(getattr(tokenizer, "all_special_ids", ()) or ())
        self.scheduling = scheduling or Scheduling()
        if self.scheduling.schedule not in SCHEDULES:
            raise ValueError(f"schedule: {self.scheduling.schedule!r} is not one of {', '.join(SCHEDULES)}")
        self.failures = FailureWindow(self.scheduling.failure_window, self.scheduling.max_failure_frac)
        self.last_run: dict[str, float] = {}  # the scheduler's own numbers for the last run (stats)
        self.context_limit: int | None = None  # the bound engine's max_model_len (prompt + row), None: none

    def bind(self, engine) -> None:
        """Called with the engine a :class:`~asyncrl.agents.play.Play` decodes with (a harness
        checks its requests' sampling settings against it); its context window, if it has one,
        bounds every row (prompt included)."""
        self.context_limit = getattr(engine, "max_model_len", None)

    def context_full(self, episode: Episode, more: int = 0) -> bool:
        """Whether ``more`` ids after the row leave no room for a sampled token in the engine's
        context window."""
        return self.context_limit is not None and len(episode.context_ids) + more >= self.context_limit

    def ended(self, episode: Episode) -> None:
        """Called as ``episode`` ends (a harness's session stops taking requests)."""

    def close(self) -> None:
        """Release what the runner holds open (a harness's endpoint)."""

    def start(self, problem: Problem) -> Episode:
        """A new episode of ``problem`` in a new environment, its prompt not yet asked for."""
        return Episode(problem, self.env_factory(), [], [])

    def run(self, engine, problems: list[Problem], n: int, between=None, on_group=None, check=None) -> list[Episode]:
        """``n`` episodes per problem (rows: problems × n, in order), each from its own environment
        reset with the same row: every member of a group starts from the same state. ``on_group``:
        called with (group index, its episodes) as soon as the group's last member ends; ``check``:
        called while waiting on calls, raises to abandon the episodes (a stop signal)."""
        play = Play(self, engine, between, check)
        episodes = play.add(problems, n)
        while play.live:
            for group in play.advance():
                if on_group is not None:
                    on_group(group.index, group.episodes)
        self.last_run = play.take_clock()
        return episodes

    def stops_of(self, episode: Episode) -> tuple[str, ...]:
        """The strings that end a turn: ``env.stop`` (and the tool stop), the template's end of turn,
        the environment's own."""
        return tuple(dict.fromkeys([*self.limits.stop, *self._turn_end(), *getattr(episode.env, "stop", ())]))

    def begin(self, pool: CallPool, i: int, episode: Episode, row: dict) -> None:
        """Start episode ``i``: its environment's ``reset`` with ``row``."""
        self.ask(pool, i, episode, "reset", episode.env.reset, row)

    def ask(self, pool: CallPool, i: int, episode: Episode, what: str, fn, *args) -> None:
        episode.asked_at = time.perf_counter()
        pool.submit((i, what), fn, args, timeout_s=self.limits.step_timeout_s, retries=self.scheduling.retries,
                    limit="env.step_timeout_s")

    def answered(self, episode: Episode, what: str, index: list, outcome, results: list | None) -> bool:
        """Take one call's outcome; True when the episode is ready for its next turn."""
        if isinstance(outcome, Failed):
            episode.end, episode.failure = "failed", f"{what} {outcome.reason}"
            episode.env_time_s += time.perf_counter() - episode.asked_at
            return False
        if what == "tool":
            results[index[0]] = outcome
            if any(r is None for r in results):
                return False
            return self._after_response(episode, self._tool_messages(episode, [r for job in results for r in job]))
        if what == "reset":
            episode.messages = check_reset(episode.env, episode.problem, outcome)
            episode.n_prompt_messages = len(episode.messages)
            episode.prompt_ids = self.turns.prompt_ids(episode.messages)
            episode.env_time_s += time.perf_counter() - episode.asked_at
            return True
        result = check_step(episode.env, episode.problem, outcome)
        episode.rewards.append(result.reward)
        episode.info = result.info
        episode.turn_log[-1].update(reward=result.reward, observation=result.messages, done=result.done)
        if result.done:
            episode.end = "done"
        return self._after_response(episode, result.messages)

    def decode(self, engine, batch: list[Episode], between, stops: tuple) -> None:
        """The next turn of each episode of ``batch``, in one engine call."""
        gen = engine.generate([e.context_ids for e in batch], between_chunks=between,
                              max_new_tokens=self.limits.turn_tokens, stop=stops)
        for row, episode in enumerate(batch):
            self._sampled(episode, gen, row)

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
        versions = [v for v in episode.versions[len(episode.versions) - len(ids):] if v >= 0]
        episode.turn_log.append({"assistant": text, "tokens": len(ids),
                                 "versions": [min(versions), max(versions)] if versions else None})
        episode.call_text = self._call_text(ids) if self.tool_format.keeps_special and self.tools else text
        if len(episode.ids) >= self.limits.episode_tokens:
            episode.end = "episode_tokens"
        elif self.context_full(episode):
            episode.end = "max_model_len"  # the engine has no room for another token of this row

    def respond(self, pool: CallPool, i: int, episode: Episode, tool_results: dict[int, list]) -> bool:
        """Submit the turn's tool calls when it calls tools, else the environment's step. True when
        the episode needs no call and is ready for its next turn now."""
        text = episode.messages[-1]["content"]
        calls = self.tool_format.parse(episode.call_text) if self.tools is not None else []
        if not calls:
            self.ask(pool, i, episode, "step", episode.env.step, text)
            return False
        own = tool_functions(episode.env)  # tools that act on the environment's state (asyncrl.agents.env)
        if own is not None and episode.turns >= self.limits.max_turns:
            calls = []  # their results would never be seen, yet the state they leave is what the reward reads
        episode.asked_at = time.perf_counter()
        if not calls:
            return self._after_response(episode, [])
        # the ToolBox bounds each call itself (env.tool_timeout_s) and never raises for the tool.
        # Plain tools of one turn run at once; with the environment's own functions, one after
        # another, as the model wrote them (they share the environment's state)
        jobs = [calls] if own is not None else [[call] for call in calls]
        tool_results[i] = [None] * len(jobs)
        for k, job in enumerate(jobs):
            pool.submit((i, "tool", k), self._call_tools, (job, own))
        return False

    def _call_text(self, ids: list[int]) -> str:
        """A turn's text with its special tokens, where a format's calls are marked by them; the
        tokens that ended the turn (eos, end of turn) cut off."""
        end = len(ids)
        while end and ids[end - 1] in self._special_ids:
            end -= 1
        return self.tokenizer.decode(ids[:end], skip_special_tokens=False)

    def _call_tools(self, calls: list, functions) -> list:
        return [(call, self.tools.call(call, functions)) for call in calls]

    def _tool_messages(self, episode: Episode, results: list) -> list[dict]:
        messages = []
        for call, result in results:
            episode.tool_calls.append({"name": result.name, "arguments": getattr(call, "arguments", None),
                                       "content": result.content, "failed": result.failed, "reason": result.reason,
                                       "latency_s": result.latency_s})
            messages.append({"role": "tool", "content": result.content})
        episode.turn_log[-1]["tool_calls"] = episode.tool_calls[len(episode.tool_calls) - len(results):]
        return messages

    def _after_response(self, episode: Episode, observation: list[dict]) -> bool:
        """The observation appended unless the episode ends here; True when it goes on."""
        episode.env_time_s += time.perf_counter() - episode.asked_at
        if episode.end is None and episode.turns >= self.limits.max_turns:
            episode.end = "max_turns"
        if episode.end is not None:
            return False
        self._observe(episode, observation)
        return episode.end is None

    def _observe(self, episode: Episode, observation: list[dict]) -> None:
        """Append ``observation``'s ids to the row, or fork a new row when the history as rendered
        does not extend the row (a template that rewrites earlier turns; ``env.history=template``
        and a rendering that differs from the sampled ids)."""
        ids = self._appended_ids(episode, observation)
        if ids is None:
            episode.messages += observation
            episode.fork(self.turns.prompt_ids(episode.messages))
            if self.context_full(episode):
                episode.end = "max_model_len"  # the history as rendered fills the context window
            return
        if len(episode.ids) + len(ids) >= self.limits.episode_tokens:
            episode.end = "episode_tokens"  # no room left to answer the observation
            return
        if self.context_full(episode, len(ids)):
            episode.end = "max_model_len"  # no room in the engine's context to answer the observation
            return
        episode.add_observed(ids)
        episode.messages += observation

    def _appended_ids(self, episode: Episode, observation: list[dict]) -> list[int] | None:
        """The ids ``observation`` appends to the row; None when the history must fork."""
        if self.history == "template":  # what the template shows a deployed model, past turns rewritten
            rendered = self.turns.prompt_ids([*episode.messages, *observation])
            context = episode.context_ids
            return rendered[len(context):] if rendered[:len(context)] == context else None
        return observed_ids(self.turns, observation, episode.ids[-1:])


def observed_ids(turns, observation: list[dict], sampled: list[int]) -> list[int] | None:
    """The ids ``turns`` appends for ``observation`` after the sampled ids ``sampled``; None where
    the template cannot extend them (a rewrite of the past: the history forks)."""
    try:
        return turns.observation_ids(observation, sampled)
    except PrefixBroken:
        return None


def episodes_to_generation(episodes: list[Episode] | list[EpisodeRow], pad_id: int) -> Generation:
    """The episodes (one row each: their current row) or rows as one Generation: prompts
    left-padded, completions right-padded; the completion mask marks sampled ids (trained), the
    observation mask observed ids (attended)."""
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
