"""Agents from any harness: one episode's side of the OpenAI-compatible endpoint (docs/harness.md).

A *harness* is the user's own agent loop, written against an OpenAI client: a function
``agent(session)`` that asyncrl calls once per episode, in a thread of its own, with a
:class:`HarnessSession` — the episode's ``base_url`` and ``api_key`` for the client, the row of the
dataset it plays. Every request it sends to that ``base_url`` is one assistant turn of the episode,
sampled by the run's engine; what it returns (or gives :meth:`HarnessSession.reward`) is its reward.

This module holds the per-episode pieces: the session, the requests as the endpoint parsed them
(:class:`Request`: validated against what the trainer can honour), the episode's mailbox between
the harness's thread and the scheduler (:class:`HarnessEpisode`), and the OpenAI response built
from a sampled turn. :mod:`asyncrl.agents.harness_runner` plays the episodes.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import math
import queue
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from asyncrl.agents.endpoint import EndpointError
from asyncrl.core.user_code import first_line

__all__ = ["Ended", "HarnessEpisode", "HarnessSession", "Request", "Sampling", "chat_response",
           "completion_response", "parse_chat", "parse_completion"]

# request fields that change the sampling distribution: a ratio-based loss needs the behaviour
# log-probs of the distribution the trainer computes, so these are refused unless neutral
_NEUTRAL = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None, "n": 1, "best_of": 1,
            "top_k": None, "min_p": None, "repetition_penalty": None}



@dataclass
class HarnessSession:
    """What a harness gets for one episode: ``base_url`` and ``api_key`` for its OpenAI client,
    ``model`` (any name is accepted), ``row`` (the dataset row: ``prompt``, ``answer``, its other
    columns, ``uid``). ``reward(x)`` sets the episode's reward from the harness's side."""

    base_url: str
    api_key: str
    model: str
    row: dict
    _reward: float | None = field(default=None, repr=False)

    def reward(self, value: float) -> None:
        """The episode's reward from the harness (added to the reward functions' score, like an
        environment's return); a finite number."""
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"session.reward: {value!r} is not a number") from None
        if not math.isfinite(value):
            raise ValueError(f"session.reward: {value!r} is not finite")
        self._reward = value


@dataclass(frozen=True)
class Sampling:
    """What the run samples with: a request may restate it, never change it."""

    temperature: float
    top_p: float
    turn_tokens: int


@dataclass
class Request:
    """One completion a harness asked for. ``messages`` (chat) or ``prompt_ids`` (text completions);
    ``tools``: the JSON schemas it offered; ``max_new``: tokens at most; ``stops``: its stop strings."""

    kind: str  # "chat" or "completion"
    body: dict
    messages: list[dict] | None = None
    tools: list[dict] | None = None
    prompt_ids: list[int] | None = None
    max_new: int = 0
    stops: tuple[str, ...] = ()
    parallel: bool | None = None  # parallel_tool_calls as asked (None: the run's default)
    done: threading.Event = field(default_factory=threading.Event)
    response: dict | None = None
    error: EndpointError | None = None

    def answer(self, response: dict) -> None:
        self.response = response
        self.done.set()

    def fail(self, error: EndpointError) -> None:
        if not self.done.is_set():
            self.error = error
            self.done.set()


@dataclass(frozen=True)
class Ended:
    """The harness's function returned (``reward``: what it returned, or None) or raised (``error``)."""

    reward: float | None = None
    error: str | None = None


class HarnessEpisode:
    """One episode's mailbox: the harness's thread puts its requests and its end in ``inbox``; the
    scheduler takes them one at a time (:meth:`next_event`, a pool call bounded by
    ``env.step_timeout_s``) and answers each request before the harness may send the next."""

    def __init__(self, fn, key: str):
        self.fn, self.key = fn, key
        self.inbox: queue.Queue = queue.Queue()
        self.session: HarnessSession | None = None
        self.pending: Request | None = None  # the request being sampled, until it is answered
        self.last_messages: list[dict] | None = None  # the last chat request's messages and its answer
        self.last_tools: list[dict] | None = None
        self.closed: str | None = None  # why the episode ended: late requests are refused with it
        self.lock = threading.Lock()
        self.wait_s = 0.0

    def launch(self, session: HarnessSession, wait_s: float) -> None:
        """Run the harness on ``session`` in a daemon thread (a hung harness must not keep the
        process alive); ``wait_s``: how long :meth:`next_event` waits at most."""
        self.session, self.wait_s = session, wait_s
        threading.Thread(target=self._run, daemon=True, name="asyncrl-harness").start()

    def _run(self) -> None:
        try:
            out = self.fn(self.session)
            if inspect.iscoroutine(out):
                out = asyncio.run(out)
            self.inbox.put(Ended(reward=_reward_of(out)))
        except BaseException as err:  # noqa: BLE001 - the harness's failure is its episode's outcome
            self.inbox.put(Ended(error=first_line(err) if isinstance(err, Exception) else f"exited ({err!r})"))

    def next_event(self) -> Request | Ended:
        """The harness's next request or its end. Returns a little after the pool's own limit at
        most, so that an abandoned wait does not keep its thread for ever."""
        try:
            return self.inbox.get(timeout=self.wait_s + 5.0)
        except queue.Empty:
            raise TimeoutError("the harness sent nothing") from None

    def submit(self, request: Request) -> None:
        """From the endpoint's thread: hand ``request`` to the scheduler."""
        with self.lock:
            if self.closed is not None:
                raise EndpointError(409, f"this episode has ended ({self.closed}); the harness's later requests "
                                         "are not part of it", code="episode_ended")
            if self.pending is not None:
                raise EndpointError(409, "one request at a time per episode: the last one is still being "
                                         "answered (use a session per parallel agent)", code="busy")
            self.pending = request
        self.inbox.put(request)

    def close(self, why: str) -> None:
        """The episode ended: a request still waiting is refused with ``why``, later ones too."""
        with self.lock:
            self.closed = why
            pending, self.pending = self.pending, None
        if pending is not None:
            pending.fail(EndpointError(409, f"this episode has ended ({why})", code="episode_ended"))


def _reward_of(out: Any) -> float | None:
    if out is None:
        return None
    if isinstance(out, bool) or not isinstance(out, (int, float)) or not math.isfinite(out):
        raise TypeError(f"the harness returned {type(out).__name__} {str(out)[:40]}; expected a finite number "
                        "(its reward) or None")
    return float(out)


def _text(content: Any, where: str) -> str:
    """A message's content as text: a string, or OpenAI's list of text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    raise EndpointError(400, f"{where}: content must be text (a string or text parts); the policy reads no "
                             "images or audio", param=where)


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise EndpointError(400, "messages: expected a non-empty list", param="messages")
    out = []
    for k, m in enumerate(raw):
        where = f"messages[{k}]"
        if not isinstance(m, dict) or m.get("role") not in ("system", "developer", "user", "assistant", "tool"):
            raise EndpointError(400, f"{where}: expected a message with role system, user, assistant or tool",
                                param=where)
        role = "system" if m["role"] == "developer" else m["role"]
        msg = {"role": role, "content": _text(m.get("content"), where)}
        if role == "assistant" and m.get("tool_calls"):
            msg["tool_calls"] = [_call_of(c, f"{where}.tool_calls") for c in m["tool_calls"]]
        if role == "tool" and m.get("tool_call_id") is not None:
            msg["tool_call_id"] = str(m["tool_call_id"])
        out.append(msg)
    return out


def _call_of(call: Any, where: str) -> dict:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise EndpointError(400, f"{where}: each tool call needs function.name", param=where)
    args = fn.get("arguments", "{}")
    try:
        args = json.loads(args) if isinstance(args, str) else args
    except json.JSONDecodeError:
        pass  # kept as the text it is: compared and rendered as such
    return {"type": "function", "id": call.get("id"), "function": {"name": fn["name"], "arguments": args}}


def _check_sampling(body: dict, sampling: Sampling) -> None:
    for key, neutral in _NEUTRAL.items():
        value = body.get(key)
        if value is not None and value != neutral and not (isinstance(value, dict) and not value):
            raise EndpointError(400, f"{key}={value!r} changes the sampling distribution, which the trainer's "
                                     "behaviour log-probs must match; leave it out", param=key)
    for key, mine in (("temperature", sampling.temperature), ("top_p", sampling.top_p)):
        value = body.get(key)
        if value is not None and not math.isclose(float(value), mine, rel_tol=1e-6):
            raise EndpointError(400, f"{key}={value} differs from the run's rollout.{key}={mine:g}: the trainer "
                                     f"computes its ratios under rollout.{key}; leave it out or send {mine:g}",
                                param=key)
    if body.get("response_format") not in (None, {"type": "text"}):
        raise EndpointError(400, "response_format: constrained decoding changes the sampling distribution; "
                                 "not offered", param="response_format")
    if body.get("tool_choice") not in (None, "auto", "none"):
        raise EndpointError(400, "tool_choice: only auto or none (a forced call changes the sampling distribution)",
                            param="tool_choice")


def _limits(body: dict, sampling: Sampling) -> tuple[int, tuple[str, ...]]:
    max_new = body.get("max_completion_tokens", body.get("max_tokens")) or sampling.turn_tokens
    if not isinstance(max_new, int) or max_new < 1:
        raise EndpointError(400, f"max_tokens: expected a positive integer, got {max_new!r}", param="max_tokens")
    stop = body.get("stop") or ()
    stop = (stop,) if isinstance(stop, str) else tuple(stop)
    if not all(isinstance(s, str) and s for s in stop):
        raise EndpointError(400, "stop: expected non-empty strings", param="stop")
    return min(max_new, sampling.turn_tokens), stop


def parse_chat(body: dict, sampling: Sampling) -> Request:
    """A ``/chat/completions`` body as a :class:`Request`; EndpointError for what cannot be honoured."""
    _check_sampling(body, sampling)
    tools = body.get("tools") or None
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise EndpointError(400, "tools: expected a list of tool schemas", param="tools")
    if body.get("tool_choice") == "none":
        tools = None
    max_new, stops = _limits(body, sampling)
    parallel = body.get("parallel_tool_calls")
    return Request("chat", body, messages=_messages(body.get("messages")), tools=tools, max_new=max_new,
                   stops=stops, parallel=None if parallel is None else bool(parallel))


def parse_completion(body: dict, sampling: Sampling, tokenizer) -> Request:
    """A ``/completions`` body: ``prompt`` as text (encoded here) or token ids (kept as sent: the
    way to keep a text harness token-in/token-out)."""
    _check_sampling(body, sampling)
    if body.get("echo") or body.get("suffix"):
        raise EndpointError(400, "echo and suffix are not offered", param="echo")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # one prompt in a list: the client's batch of one
    if isinstance(prompt, str) and prompt:
        ids = tokenizer(prompt)["input_ids"]
    elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        if not all(0 <= t < len(tokenizer) for t in prompt):
            raise EndpointError(400, f"prompt: token ids must be in [0, {len(tokenizer)})", param="prompt")
        ids = list(prompt)
    else:
        raise EndpointError(400, "prompt: expected one non-empty string or list of token ids", param="prompt")
    max_new, stops = _limits(body, sampling)
    return Request("completion", body, prompt_ids=ids, max_new=max_new, stops=stops)


def _usage(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _logprobs(tokenizer, ids: list[int], logps: list[float]) -> dict:
    tokens = tokenizer.convert_ids_to_tokens(ids)
    return {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(tokens, logps)]}


def chat_response(turn: dict, request: Request, tokenizer, model: str) -> dict:
    """The ``chat.completion`` for a sampled ``turn`` (text, ids, logps, calls, finish, prompt, version)."""
    message: dict[str, Any] = {"role": "assistant", "content": turn["content"]}
    if turn["calls"]:
        message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                                  "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                 for c in turn["calls"]]
    choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if turn["calls"] else turn["finish"],
              "logprobs": _logprobs(tokenizer, turn["ids"], turn["logps"]) if request.body.get("logprobs") else None}
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model, "choices": [choice], "usage": _usage(turn["prompt"], len(turn["ids"])),
            "system_fingerprint": f"asyncrl-v{turn['version']}"}


def completion_response(turn: dict, request: Request, tokenizer, model: str) -> dict:
    """The ``text_completion`` for a sampled ``turn``; ``token_ids``: the sampled ids (send the
    prompt back as ids, its earlier ids and these, to stay token-in/token-out)."""
    logprobs = None
    if request.body.get("logprobs") is not None:
        logprobs = {"tokens": tokenizer.convert_ids_to_tokens(turn["ids"]), "token_logprobs": turn["logps"],
                    "top_logprobs": None, "text_offset": None}
    choice = {"index": 0, "text": turn["text"], "finish_reason": turn["finish"], "logprobs": logprobs,
              "token_ids": turn["ids"]}
    return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": model, "choices": [choice], "usage": _usage(turn["prompt"], len(turn["ids"])),
            "system_fingerprint": f"asyncrl-v{turn['version']}"}
