"""An episode as data: one JSON-able row of ``episodes.jsonl`` (docs/agents.md, "Episodes as data").

A row holds the prompt's messages and, per assistant turn, what the model wrote (its text as the
conversation holds it, its token count, the oldest and newest policy version among its tokens),
then either the tool calls it made (name, arguments, result, failed, reason, seconds) or what the
environment answered (its messages, its reward, whether it ended the episode); then why the episode
ended, its environment return and its reward as trained. Texts longer than :data:`MAX_CHARS` are cut
with a marker, so that one environment that prints a whole file does not fill the file.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_CHARS", "episode_record"]

MAX_CHARS = 4000


def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > MAX_CHARS:
        return text[:MAX_CHARS] + f"…[cut {len(text) - MAX_CHARS} chars]"
    return text


def _messages(messages) -> list[dict]:
    return [{"role": m.get("role"), "content": _cut(m.get("content"))} for m in messages or () if isinstance(m, dict)]


def _turn(turn: dict) -> dict:
    out = {"assistant": _cut(turn["assistant"]), "tokens": turn["tokens"], "versions": turn["versions"]}
    if "tool_calls" in turn:
        out["tool_calls"] = [{**call, "content": _cut(call.get("content"))} for call in turn["tool_calls"]]
    if "observation" in turn:
        out.update(observation=_messages(turn["observation"]), reward=turn.get("reward"), done=turn.get("done"))
    return out


def episode_record(episode, env_return: float, reward: float | None) -> dict:
    """The row of ``episode`` (an :class:`asyncrl.agents.episode.Episode` that ended; the members of
    a group share the problem's ``uid``); ``reward``: what it trains on (None for an episode whose
    group was left out)."""
    return {"uid": episode.problem.uid,
            "prompt": _messages(episode.messages[:episode.n_prompt_messages]),
            "turns": [_turn(t) for t in episode.turn_log], "end": episode.end, "failure": episode.failure or None,
            "env_return": env_return, "reward": reward, "tokens": sum(len(r.ids) for r in episode.rows),
            "rows": len(episode.rows), "forks": episode.forks,
            "env_time_s": episode.env_time_s}
