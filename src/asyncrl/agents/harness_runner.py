"""Episodes played by a harness through the run's OpenAI-compatible endpoint (docs/harness.md).

:class:`HarnessRunner` is an :class:`~asyncrl.agents.episode.EpisodeRunner` whose episodes'
environment is the user's harness: the scheduler (:class:`~asyncrl.agents.play.Play`) starts each
one's harness in its own thread, then waits for its requests as it waits for environment calls.
A request that arrives is the episode's next turn: its context is built (below), the engine samples
it with the episodes ready at the same time, and the answer goes back to the harness.

Rows from what the harness sent, by prefix matching, token-in/token-out:

* a chat request whose messages begin with the last request's messages and the answer given to it
  (the harness appended tool results or a user turn) extends the row: the new messages' ids are
  observations (attended, never trained), the sampled ids stay the engine's own;
* any other request — the harness rewrote or summarised its history, dropped earlier thinking,
  changed its tools — forks: the row so far is closed and a new row of the same episode starts
  from the request as the chat template renders it (counted in ``episode/forks``);
* a text completion extends the row when its prompt's ids begin with the row's ids (send the
  prompt back as ids: ``token_ids`` of the last answer after the last prompt's), else it forks.

The episode ends when the harness's function returns (its reward: the number it returned or gave
``session.reward``), at ``env.max_turns`` completions or ``env.episode_tokens`` tokens in a row
(the harness's next request is refused, 400), or as failed when the harness raises or sends
nothing for ``env.step_timeout_s``: counted, its group dropped, the run goes on.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import threading
import time
import warnings

from asyncrl.agents.calls import Failed
from asyncrl.agents.endpoint import Endpoint, EndpointError
from asyncrl.agents.episode import Episode, EpisodeRunner, observed_ids
from asyncrl.agents.harness import (Ended, HarnessEpisode, HarnessSession, Request, Sampling, chat_response,
                                    completion_response, parse_chat, parse_completion)
from asyncrl.agents.tool_formats import turn_stops
from asyncrl.core.heap import trim_free_heap
from asyncrl.tasks import Problem

__all__ = ["HarnessRunner"]

# where a format's calls begin in a turn's text: the text before it is the message's content
TRIM_EVERY = 64  # ended episodes between two trims of the heap (core.heap): a few ms each
_CALL_MARKERS = {"hermes": "<tool_call>", "llama3": "<|python_tag|>", "mistral": "[TOOL_CALLS]"}


def _normal(message: dict) -> tuple:
    """A message as compared for prefix matching: role, text, calls (ids and spacing aside)."""
    calls = tuple((c["function"]["name"], json.dumps(c["function"]["arguments"], sort_keys=True))
                  for c in message.get("tool_calls") or ())
    return message["role"], (message.get("content") or "").strip(), calls


def _extension(last: list[dict] | None, messages: list[dict]) -> list[dict] | None:
    """The messages ``messages`` adds after ``last``, or None when it does not begin with ``last``."""
    if last is None or len(messages) <= len(last):
        return None
    if any(_normal(a) != _normal(b) for a, b in zip(last, messages)):
        return None
    return messages[len(last):]


class HarnessRunner(EpisodeRunner):
    """Plays ``harness`` (the user's ``agent(session)``) episodes. ``turns_of(tools)``: the
    renderer for a request's tool schemas; ``sampling``: the run's (a request may not change it);
    ``host``/``port``: where the endpoint listens; ``parallel``: the default of a request's
    ``parallel_tool_calls``."""

    def __init__(self, harness, tokenizer, turns_of, limits, scheduling, tool_format, sampling: Sampling, *,
                 host: str = "127.0.0.1", port: int = 0, model: str = "asyncrl-policy", parallel: bool = False):
        super().__init__(None, turns_of(None), tokenizer, limits, None, scheduling, tool_format)
        self.harness, self.turns_of, self.sampling = harness, turns_of, sampling
        self.host, self.port, self.model, self.parallel = host, port, model, parallel
        self.sessions: dict[str, HarnessEpisode] = {}
        self.ended_count = 0
        self.lock = threading.Lock()
        self.endpoint: Endpoint | None = None

    # -- the endpoint's backend (called from its threads) ---------------------------------------

    def chat(self, session: str, body: dict) -> dict:
        return self._answer(session, parse_chat(body, self.sampling))

    def complete(self, session: str, body: dict) -> dict:
        return self._answer(session, parse_completion(body, self.sampling, self.tokenizer))

    def models(self) -> list[str]:
        return [self.model]

    def _answer(self, session: str, request: Request) -> dict:
        with self.lock:
            episode = self.sessions.get(session)
        if episode is None:
            raise EndpointError(404, "unknown session: its episode has ended, or the base_url is not an episode's",
                                code="unknown_session")
        episode.submit(request)
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.response

    # -- lifetime ------------------------------------------------------------------------------

    def serve(self) -> Endpoint:
        """The endpoint, started on first use."""
        if self.endpoint is None:
            self.endpoint = Endpoint(self, host=self.host, port=self.port).start()
            if not _loopback(self.host):
                warnings.warn(f"asyncrl: the harness endpoint listens on {self.endpoint.url} (env.endpoint_host="
                              f"{self.host}): anyone who can reach it and holds the run's token samples the policy",
                              stacklevel=2)
        return self.endpoint

    def close(self) -> None:
        """Stop serving: requests in flight and later ones are refused (the run has stopped)."""
        with self.lock:
            sessions, self.sessions = list(self.sessions.values()), {}
        for episode in sessions:
            episode.close("the run has stopped")
        if self.endpoint is not None:
            self.endpoint.close()

    def bind(self, engine) -> None:
        """Requests are checked against what ``engine`` samples with (evaluation's engine differs)."""
        super().bind(engine)
        spec = getattr(engine, "spec", None)
        if spec is not None:
            self.sampling = Sampling(spec.temperature, spec.top_p, self.sampling.turn_tokens)

    # -- the scheduler's side ------------------------------------------------------------------

    def start(self, problem: Problem) -> Episode:
        self.serve()
        key = secrets.token_urlsafe(16)
        env = HarnessEpisode(self.harness, key)
        with self.lock:
            self.sessions[key] = env
        return Episode(problem, env, [], [])

    def stops_of(self, episode: Episode) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.limits.stop, *self._turn_end()]))

    def begin(self, pool, i: int, episode: Episode, row: dict) -> None:
        """The harness starts on ``row``; its first request is the episode's prompt."""
        env = episode.env
        env.launch(HarnessSession(self.endpoint.base_url(env.key), self.endpoint.token, self.model, row),
                   self.limits.step_timeout_s)
        self._await(pool, i, episode)

    def _await(self, pool, i: int, episode: Episode) -> None:
        episode.asked_at = time.perf_counter()
        pool.submit((i, "request"), episode.env.next_event, (), timeout_s=self.limits.step_timeout_s, retries=0,
                    limit="env.step_timeout_s")

    def answered(self, episode: Episode, what: str, index: list, outcome, results) -> bool:
        episode.env_time_s += time.perf_counter() - episode.asked_at
        if isinstance(outcome, Failed):
            episode.end, episode.failure = "failed", f"harness: no request or end {outcome.reason}"
            return False
        if isinstance(outcome, Ended):
            if outcome.error is not None:
                episode.end, episode.failure = "failed", f"harness raised {outcome.error}"
            elif not episode.turns:  # nothing sampled: no row to train on
                episode.end, episode.failure = "failed", "harness returned before its first request"
            else:
                episode.end = "done"
                self._harness_reward(episode, outcome.reward)
            return False
        try:
            if episode.turns >= self.limits.max_turns:
                raise EndpointError(400, f"this episode has had env.max_turns={self.limits.max_turns} completions",
                                    code="max_turns")
            self._take(episode, outcome)
        except EndpointError as err:
            outcome.fail(err)
            episode.end = err.code if err.code in ("max_turns", "episode_tokens", "max_model_len") else "failed"
            episode.failure = "" if episode.end != "failed" else f"harness request refused: {err.message}"
            self._harness_reward(episode, None)
            return False
        return True

    def _harness_reward(self, episode: Episode, returned: float | None) -> None:
        reward = returned if returned is not None else episode.env.session._reward
        if reward is not None:
            episode.rewards.append(reward)

    def _take(self, episode: Episode, request: Request) -> None:
        """``request``'s context as the episode's row: appended to, or a fork (module docstring)."""
        first = not episode.turns
        if request.kind == "chat":
            turns = self.turns_of(request.tools)
            new = None
            if not first and _same(episode.env.last_tools, request.tools):
                new = _extension(episode.env.last_messages, request.messages)
            ids = observed_ids(turns, new, episode.ids[-1:]) if new is not None else None
            prompt = turns.prompt_ids(request.messages) if ids is None else None
            if first:
                episode.n_prompt_messages = len(request.messages)
            episode.messages = [dict(m) for m in request.messages]
        else:
            context = episode.context_ids
            extends = not first and request.prompt_ids[:len(context)] == context
            ids = request.prompt_ids[len(context):] if extends else None
            prompt = None if extends else request.prompt_ids
            if first:
                episode.messages = [{"role": "user", "content": self.tokenizer.decode(prompt, skip_special_tokens=True)}]
                episode.n_prompt_messages = 1
        if prompt is not None:
            if first:
                episode.prompt_ids = list(prompt)
            else:
                episode.fork(prompt)
        elif len(episode.ids) + len(ids) >= self.limits.episode_tokens:
            raise EndpointError(400, f"the episode's row would pass env.episode_tokens={self.limits.episode_tokens} "
                                     "tokens", code="episode_tokens")
        elif self.context_full(episode, len(ids)):
            raise EndpointError(400, f"the episode's context would reach the engine's max_model_len={self.context_limit} "
                                     "tokens", code="max_model_len")
        else:
            episode.add_observed(ids)
        if prompt is not None and self.context_full(episode):
            raise EndpointError(400, f"the request's prompt fills the engine's max_model_len={self.context_limit} tokens",
                                code="max_model_len")

    def decode(self, engine, batch: list[Episode], between, stops: tuple) -> None:
        """The episodes' requests, one engine call per distinct (max tokens, stop strings)."""
        calls: dict[tuple, list[Episode]] = {}
        for episode in batch:
            request = episode.env.pending
            extra = turn_stops(self.tool_format, self._parallel(request)) if request.tools else ()
            key = (request.max_new, tuple(dict.fromkeys([*stops, *extra, *request.stops])))
            calls.setdefault(key, []).append(episode)
        for (max_new, stop), episodes in calls.items():
            gen = engine.generate([e.context_ids for e in episodes], between_chunks=between, max_new_tokens=max_new,
                                  stop=stop)
            for row, episode in enumerate(episodes):
                prompt = len(episode.context_ids)
                self._sampled(episode, gen, row)
                self._deliver(episode, prompt, max_new)

    def _parallel(self, request: Request) -> bool:
        return self.parallel if request.parallel is None else request.parallel

    def _deliver(self, episode: Episode, prompt: int, max_new: int) -> None:
        """Answer the episode's pending request with the turn just sampled."""
        env, request = episode.env, episode.env.pending
        n = episode.turn_log[-1]["tokens"]
        ids, logps = episode.ids[len(episode.ids) - n:], episode.logps[len(episode.logps) - n:]
        text = episode.messages[-1]["content"]
        calls = []
        if request.tools:
            parsed = self.tool_format.parse(self._call_text(ids) if self.tool_format.keeps_special else text)
            calls = [c for c in parsed if hasattr(c, "arguments")]  # a malformed call stays text
        marker = _CALL_MARKERS.get(self.tool_format.name, "")
        content = (text.split(marker)[0].strip() if marker else "") if calls else text
        versions = [v for v in episode.versions[len(episode.versions) - n:] if v >= 0]
        finish = "length" if n >= max_new or episode.end in ("episode_tokens", "max_model_len") else "stop"
        turn = {"content": content or (None if calls else ""), "text": text, "ids": ids, "logps": logps,
                "calls": calls, "finish": finish, "prompt": prompt, "version": max(versions, default=-1)}
        build = chat_response if request.kind == "chat" else completion_response
        response = build(turn, request, self.tokenizer, self.model)
        if request.kind == "chat":
            env.last_messages = [*request.messages, _as_sent(response["choices"][0]["message"])]
            env.last_tools = request.tools
        with env.lock:
            env.pending = None
        request.answer(response)

    def respond(self, pool, i: int, episode: Episode, tool_results: dict) -> bool:
        self._await(pool, i, episode)  # its next request, or its end
        return False

    def ended(self, episode: Episode) -> None:
        with self.lock:
            self.sessions.pop(episode.env.key, None)
            self.ended_count += 1
            trim = self.ended_count % TRIM_EVERY == 0
        episode.env.close(f"it ended: {episode.end}")
        if trim:  # the threads of ended episodes and their requests left freed pages in the heap
            trim_free_heap()


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _same(a: list[dict] | None, b: list[dict] | None) -> bool:
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _as_sent(message: dict) -> dict:
    """The answer as a harness sends it back (arguments parsed, as requests' messages are)."""
    out = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        out["tool_calls"] = [{"type": "function", "id": c["id"],
                              "function": {"name": c["function"]["name"],
                                           "arguments": json.loads(c["function"]["arguments"])}}
                             for c in message["tool_calls"]]
    return out
