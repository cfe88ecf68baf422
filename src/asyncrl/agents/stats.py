"""Episode statistics of a step: turns, lengths, observed-token share, environment time, tool calls
and failures per tool, how episodes ended. Plain sums that travel with a worker's result (picklable)
and add up across work units; :meth:`EpisodeStats.metrics` turns them into the step's metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["EpisodeStats"]


@dataclass
class EpisodeStats:
    episodes: int = 0
    rows: int = 0  # training rows: one per episode, more where a history forked
    forks: int = 0  # histories rewritten mid-episode (a new row each)
    turns: int = 0
    turns_max: int = 0
    lengths: list[int] = field(default_factory=list)  # tokens after the prompt, per episode
    observed_tokens: int = 0
    env_time_s: float = 0.0
    env_reward: float = 0.0
    ends: Counter = field(default_factory=Counter)  # done, max_turns, episode_tokens, template
    tool_calls: Counter = field(default_factory=Counter)  # per tool name
    tool_failures: Counter = field(default_factory=Counter)
    tool_truncated: Counter = field(default_factory=Counter)
    tool_seconds: Counter = field(default_factory=Counter)  # wall time of the calls, per tool name
    failed_groups: int = 0  # groups left out of training for a failed episode
    call_retries: int = 0  # environment calls tried again after a failure
    calls_in_flight_max: int = 0  # the most environment and tool calls running at once
    env_wait_s: float = 0.0  # time the scheduler had nothing to decode: every live episode waited on a call
    decode_s: float = 0.0  # time in the engine's calls
    decodes: int = 0  # engine calls
    in_flight_max: int = 0  # the most episodes in flight at once
    durations: list[float] = field(default_factory=list)  # seconds from each episode's start to its end
    # the episodes as data (asyncrl.agents.records): what episodes.jsonl holds at the steps it is written
    records: list[dict] = field(default_factory=list)

    def add_scheduler(self, run: dict, failed_groups: int) -> None:
        """The scheduler's numbers for one run of episodes (``EpisodeRunner.last_run``)."""
        self.failed_groups += failed_groups
        self.call_retries += int(run.get("call_retries", 0))
        self.calls_in_flight_max = max(self.calls_in_flight_max, int(run.get("calls_in_flight_max", 0)))
        self.env_wait_s += run.get("env_wait_s", 0.0)
        self.decode_s += run.get("decode_s", 0.0)
        self.decodes += int(run.get("decodes", 0))
        self.in_flight_max = max(self.in_flight_max, int(run.get("in_flight_max", 0)))

    def add_episodes(self, episodes, env_returns: list[float]) -> None:
        for e, ret in zip(episodes, env_returns):
            self.episodes += 1
            self.rows += len(e.rows)
            self.forks += e.forks
            self.turns += e.turns
            self.turns_max = max(self.turns_max, e.turns)
            self.lengths.append(sum(len(r.ids) for r in e.rows))
            self.observed_tokens += sum(sum(r.observed) for r in e.rows)
            self.env_time_s += e.env_time_s
            self.env_reward += ret
            self.ends[e.end] += 1
            self.durations.append(e.duration_s)

    def add_tool_counts(self, counts: dict[str, dict[str, int]]) -> None:
        self.tool_calls.update(counts.get("calls", {}))
        self.tool_failures.update(counts.get("failures", {}))
        self.tool_truncated.update(counts.get("truncated", {}))
        self.tool_seconds.update(counts.get("seconds", {}))

    def merge(self, other: "EpisodeStats") -> None:
        self.episodes += other.episodes
        self.rows += other.rows
        self.forks += other.forks
        self.turns += other.turns
        self.turns_max = max(self.turns_max, other.turns_max)
        self.lengths += other.lengths
        self.durations += other.durations
        self.records += other.records
        self.observed_tokens += other.observed_tokens
        self.env_time_s += other.env_time_s
        self.env_reward += other.env_reward
        self.add_scheduler(vars(other), other.failed_groups)
        for mine, theirs in ((self.ends, other.ends), (self.tool_calls, other.tool_calls),
                             (self.tool_failures, other.tool_failures), (self.tool_truncated, other.tool_truncated),
                             (self.tool_seconds, other.tool_seconds)):
            mine.update(theirs)

    def metrics(self) -> dict[str, float]:
        """``episode/*`` and ``tool/<name>/*`` metrics; empty when no episode ran."""
        if not self.episodes:
            return {}
        n, lengths = self.episodes, sorted(self.lengths)
        tokens = sum(lengths)

        def quantile(q: float) -> float:
            return float(lengths[min(len(lengths) - 1, int(q * len(lengths)))])

        out = {"episode/count": n, "episode/rows": self.rows, "episode/forks": self.forks, "episode/turns_mean": self.turns / n, "episode/turns_max": self.turns_max,
               "episode/len_mean": tokens / n, "episode/len_p50": quantile(0.5), "episode/len_p90": quantile(0.9),
               "episode/len_max": float(lengths[-1]),
               "episode/masked_token_frac": self.observed_tokens / tokens if tokens else 0.0,
               "episode/env_time_s": self.env_time_s, "episode/env_reward_mean": self.env_reward / n,
               "episode/failed": self.ends.get("failed", 0), "episode/failed_groups": self.failed_groups,
               "episode/call_retries": self.call_retries, "episode/calls_in_flight_max": self.calls_in_flight_max,
               "episode/env_wait_s": self.env_wait_s, "episode/decode_s": self.decode_s,
               "episode/decodes": self.decodes, "episode/in_flight_max": self.in_flight_max,
               "episode/duration_mean_s": sum(self.durations) / len(self.durations) if self.durations else 0.0,
               "episode/duration_max_s": max(self.durations, default=0.0)}
        out.update({f"episode/end_{reason}": count / n for reason, count in self.ends.items()})
        for name in sorted(set(self.tool_calls) | set(self.tool_failures)):
            out[f"tool/{name}/calls"] = self.tool_calls[name]
            out[f"tool/{name}/failures"] = self.tool_failures[name]
            if self.tool_calls[name]:
                out[f"tool/{name}/latency_mean_s"] = self.tool_seconds[name] / self.tool_calls[name]
            if self.tool_truncated[name]:
                out[f"tool/{name}/truncated"] = self.tool_truncated[name]
        return out
