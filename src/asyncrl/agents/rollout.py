"""Episodes as a rollout (asyncrl.rollout.rollouts): play them, score them, make the batch.

The reward of an episode is the weighted sum of the reward functions (``reward.funcs``; by default
the task's own check of the final answer), which receive the whole episode in TRL's form — the
conversation after the prompt as ``completions`` (a list of messages), and ``tool_calls``,
``env_info``, ``env_reward`` and ``turns`` as keyword arguments — plus the environment's per-turn
rewards r_1, r_2, ... discounted by γ = ``env.turn_discount``: Σ_t γ^(t−1) r_t. Tool and
environment output keep their roles there (``tool``, ``user``): the built-in rewards read the
answer from the final assistant turn only, and reward models render the roles. An environment that
returns no rewards (0) leaves the trajectory reward alone, the default. Reward functions also get
``environments``: the episodes' environment instances (TRL's name; an environment's ``instance``
where it has one, asyncrl.agents.env: for ``env.factory``, the user's class's instances, whose
``get_reward`` the reward function ``asyncrl.envs.trl:get_reward`` reads).
"""

from __future__ import annotations

import dataclasses
import json

import torch

from asyncrl.agents import ENVIRONMENTS, FACTORY_ADAPTER
from asyncrl.agents.env import build_env
from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
from asyncrl.agents.records import episode_record
from asyncrl.agents.render import ChatTurns, make_turns
from asyncrl.agents.stats import EpisodeStats
from asyncrl.core.import_path import resolve
from asyncrl.rollout.rollouts import RolloutOut
from asyncrl.rollout.scoring import group_ids_of
from asyncrl.tasks import Problem
from asyncrl.tasks.chat import EpisodeText, completion_text
from asyncrl.types import Batch

__all__ = ["EpisodeRollout"]


class EpisodeRollout:
    def __init__(self, cfg, rewards, tokenizer, schedule: str | None = None):
        """``schedule``: how episodes share the engine (``env.schedule`` when None; evaluation
        passes ``eval.schedule``)."""
        from asyncrl.agents.python_tool import PythonLimits
        from asyncrl.agents.tools import ToolBox
        from asyncrl.agents.toolset import load_tools

        env = cfg.env
        self.rewards, self.tokenizer, self.discount = rewards, tokenizer, env.turn_discount
        if env.harness:
            self.tools, self.runner = None, _harness_runner(cfg, tokenizer, schedule)
            self.tool_format = self.runner.tool_format
            return
        tools = load_tools(env.tools, python_limits=PythonLimits(sandbox=env.python_sandbox))
        if env.factory:  # a TRL environment class: its public methods are tools too, after env.tools (TRL's order)
            make_env, method_tools = resolve(FACTORY_ADAPTER)(env)
            tools += method_tools
        else:
            factory, kwargs = resolve(ENVIRONMENTS.lookup(env.environment)), dict(env.kwargs)
            make_env = lambda: build_env(factory, kwargs)  # noqa: E731
        self.tools = ToolBox(tools, timeout_s=env.tool_timeout_s, max_chars=env.tool_max_chars) if tools else None
        turns = make_turns(tokenizer, cfg.policy.chat_template, self.tools.schemas if self.tools else ())
        self.tool_format, tool_stops = _tool_format(env, tokenizer, turns) if self.tools else (None, ())
        self.runner = EpisodeRunner(make_env, turns, tokenizer, _limits(cfg, tool_stops), self.tools,
                                    _scheduling(env, schedule), tool_format=self.tool_format, history=env.history)

    def close(self) -> None:
        """Release what the episodes hold open (a harness's endpoint: it refuses requests after)."""
        self.runner.close()

    def run(self, engine, problems: list[Problem], n: int, *, between_chunks=None,
            first_group_id: int = 0, keep_failed: bool = False, stop_check=None) -> RolloutOut:
        """The episodes as a scored batch. A group with a failed episode (a call that failed on its
        last try) is left out and named in ``failed_groups``; with ``keep_failed`` (evaluation) its
        rows stay, unscored, with reward 0. ``stop_check``: raises, while episodes wait on their
        environments, when the run must stop."""
        episodes = self.runner.run(engine, problems, n, between_chunks, check=stop_check)
        return self.finish(episodes, n, first_group_id, self.runner.last_run, keep_failed=keep_failed)

    def play(self, engine, between_chunks=None):
        """Episodes in flight for a caller that adds groups as they come and takes each one as it
        ends (an async rollout worker): a :class:`~asyncrl.agents.play.Play`; score each finished
        group with :meth:`finish`."""
        from asyncrl.agents.play import Play

        return Play(self.runner, engine, between_chunks)

    def finish(self, episodes: list, n: int, first_group_id: int = 0, scheduler: dict | None = None, *,
               keep_failed: bool = False) -> RolloutOut:
        """``episodes`` (groups of ``n``, in order) scored into a batch, with their statistics and
        ``scheduler``'s numbers (``Play.take_clock``)."""
        failed = sorted({i // n for i, e in enumerate(episodes) if e.end == "failed"})
        rows = [i for i, e in enumerate(episodes) if keep_failed or i // n not in failed]
        scored = [i for i in rows if episodes[i].end != "failed"]
        env_returns = [sum(self.discount ** t * r for t, r in enumerate(e.rewards)) for e in episodes]
        total = torch.zeros(len(episodes), dtype=torch.float32)
        parts = failures = None
        if scored:
            scores = self._score([episodes[i] for i in scored], [env_returns[i] for i in scored])
            total[scored] = torch.tensor([s + env_returns[i] for s, i in zip(scores.total, scored)])
            if len(scored) == len(rows):
                parts, failures = self.rewards.parts_tensor(scores), self.rewards.failed_tensor(scores)
        # an episode whose history forked trains on several rows, each with its reward (and, in
        # the trainer, its advantage: the group baseline is taken over episodes, not rows)
        owner = [i for i in rows for _ in episodes[i].rows]
        gen = episodes_to_generation([r for i in rows for r in episodes[i].rows], self.tokenizer.pad_token_id)
        fields = {f.name: getattr(gen, f.name) for f in dataclasses.fields(gen)}
        group_ids = group_ids_of(len(episodes) // n, n, first_group_id)[owner]
        forked = len(owner) > len(rows)
        batch = Batch(**fields, rewards=total[owner], group_ids=group_ids, advantages=torch.zeros(len(owner)),
                      reward_parts=None if parts is None else parts[_positions(rows, owner)],
                      reward_failed=None if failures is None else failures[_positions(rows, owner)],
                      episode_ids=torch.tensor([i % n for i in owner]) if forked else None)
        stats = EpisodeStats()
        stats.add_episodes(episodes, env_returns)
        trained = dict(zip(rows, total[rows].tolist()))
        stats.records = [episode_record(e, env_returns[i], trained.get(i) if e.end != "failed" else None)
                         for i, e in enumerate(episodes)]
        stats.add_scheduler(scheduler or {}, failed_groups=len(failed))
        if self.tools is not None:
            stats.add_tool_counts(self.tools.take_counts())
        texts = [self.tokenizer.decode(r.ids, skip_special_tokens=True) for i in rows for r in episodes[i].rows]
        return RolloutOut(batch, texts, stats, failed_groups=[first_group_id + g for g in failed])

    def _score(self, episodes: list, env_returns: list[float]):
        rows = [e.problem for e in episodes]
        # text form: the decoded ids, still carrying the messages, so that answer extraction reads
        # the final assistant turn and reward models see the tools' and environment's roles
        texts = [EpisodeText(self.tokenizer.decode(e.ids, skip_special_tokens=True), e.completion_messages)
                 for e in episodes]
        finals = [completion_text(e.completion_messages) for e in episodes]
        shown = [e.completion_messages for e in episodes] if self.rewards.conversational else texts
        extra = {"tool_calls": [e.tool_calls for e in episodes], "env_info": [e.info for e in episodes],
                 "env_reward": env_returns, "turns": [e.turns for e in episodes],
                 "environments": [getattr(e.env, "instance", e.env) for e in episodes]}
        return self.rewards.score(finals, rows, shown=shown, extra=extra)


def _positions(rows: list[int], owner: list[int]) -> torch.Tensor:
    """For each training row, the position of its episode among ``rows`` (the scored episodes)."""
    at = {i: k for k, i in enumerate(rows)}
    return torch.tensor([at[i] for i in owner], dtype=torch.long)


def _tool_format(env, tokenizer, turns):
    """(the run's tool-call format, the stops it adds) for ``env.tool_format`` and
    ``env.parallel_tool_calls``; a run whose model cannot see the tools' schemas is refused unless
    its task teaches the calls (``env.tool_schemas=none``)."""
    from asyncrl.agents.tool_formats import turn_stops
    from asyncrl.core.loader import ConfigError

    templated = isinstance(turns, ChatTurns)
    if not templated and env.tool_schemas == "template":
        raise ConfigError("env.tools", "the policy has no chat template in use (its tokenizer has none, or "
                          "policy.chat_template=false), so the model would never see the tools' schemas; use a "
                          "policy with one, or env.tool_schemas=none where the task's warm start demonstrates "
                          "the calls")
    fmt, parallel = _call_settings(env, tokenizer, templated)
    return fmt, turn_stops(fmt, parallel)


def _call_settings(env, tokenizer, templated: bool):
    """(the tool-call format of ``env.tool_format``, whether a turn may make several calls)."""
    from asyncrl.agents.tool_formats import tool_format

    fmt = tool_format(env.tool_format, tokenizer if templated else None)
    return fmt, {"on": True, "off": False}.get(env.parallel_tool_calls, templated)


def _limits(cfg, stops: tuple[str, ...] = ()) -> EpisodeLimits:
    env = cfg.env
    return EpisodeLimits(max_turns=env.max_turns, turn_tokens=env.turn_tokens or cfg.rollout.max_new_tokens,
                         episode_tokens=env.episode_tokens, stop=(*env.stop, *stops), step_timeout_s=env.step_timeout_s)


def _scheduling(env, schedule: str | None = None) -> Scheduling:
    return Scheduling(schedule=schedule or env.schedule, concurrency=env.concurrency, retries=env.retries,
                      backoff_s=env.retry_backoff_s, max_failure_frac=env.max_failure_frac,
                      failure_window=env.failure_window)


def _harness_runner(cfg, tokenizer, schedule: str | None = None):
    """The runner of ``env.harness`` episodes: the harness's requests, through the run's endpoint."""
    from asyncrl.agents.harness import Sampling
    from asyncrl.agents.harness_runner import HarnessRunner

    env, policy, ro = cfg.env, cfg.policy, cfg.rollout
    cache: dict[str, object] = {}

    def turns_of(tools):  # a renderer per distinct tool set: the template shows their schemas
        key = json.dumps(tools, sort_keys=True)
        if key not in cache:
            cache[key] = make_turns(tokenizer, policy.chat_template, tools or ())
        return cache[key]

    fmt, parallel = _call_settings(env, tokenizer, isinstance(turns_of(None), ChatTurns))
    limits = _limits(cfg)
    sampling = Sampling(ro.temperature, ro.top_p, limits.turn_tokens)
    return HarnessRunner(resolve(env.harness, "env.harness", need_callable=True), tokenizer, turns_of, limits,
                         _scheduling(env, schedule), fmt, sampling, host=env.endpoint_host,
                         port=env.endpoint_port, parallel=parallel)

