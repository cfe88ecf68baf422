"""A harness's episodes through the endpoint, with the real HTTP server and the ``openai`` client:
rows are the engine's sampled ids token for token, a rewritten context forks a row, tokens after a
weight update carry the new version, a crashing or silent harness fails its episode only, sampling
the trainer cannot honour is refused, and nothing is served once the runner closes."""

import json
import threading
import time

import openai
import pytest

from .episode_fakes import DROPS_THINK, ScriptedEngine, chat_tokenizer

from asyncrl.agents.episode import EpisodeLimits, Scheduling
from asyncrl.agents.harness import Sampling
from asyncrl.agents.harness_runner import HarnessRunner
from asyncrl.agents.render import ChatTurns
from asyncrl.agents.tool_formats import FORMATS
from asyncrl.tasks import Problem

PROBLEMS = [Problem(uid="p0", prompt="go", answer="", solution="", messages=(("user", "go"),))]
LIMITS = EpisodeLimits(max_turns=3, turn_tokens=64, episode_tokens=400, step_timeout_s=20)
CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
ADD = {"type": "function", "function": {"name": "add", "description": "a + b",
                                        "parameters": {"type": "object", "properties": {"a": {"type": "integer"},
                                                                                        "b": {"type": "integer"}}}}}
SHOWS_TOOLS = "{% if tools %}tools: {% for t in tools %}{{ t.function.name }}{% endfor %}<|im_end|>\n{% endif %}" + DROPS_THINK


def client(session):
    return openai.OpenAI(base_url=session.base_url, api_key=session.api_key, max_retries=0, timeout=30)


def make(agent, script, template=DROPS_THINK, limits=LIMITS):
    tok = chat_tokenizer(template)
    turns = [tok(text, add_special_tokens=False)["input_ids"] + [tok.eos_token_id] for text in script]
    engine = ScriptedEngine(tok, [[t] for t in turns])
    runner = HarnessRunner(agent, tok, lambda tools: ChatTurns(tok, tools or ()), limits,
                           Scheduling(schedule="rounds", backoff_s=0.0), FORMATS["hermes"], Sampling(1.0, 1.0, 64))
    return tok, turns, engine, runner


def play(agent, script, **kw):
    tok, turns, engine, runner = make(agent, script, **kw)
    try:
        episodes = runner.run(engine, PROBLEMS, 1)
    finally:
        runner.close()
    return tok, turns, engine, episodes[0]


def test_a_harness_turns_are_the_engines_ids_token_for_token():
    seen = []

    def agent(session):
        c = client(session)
        messages = list(session.row["prompt"])
        first = c.chat.completions.create(model=session.model, messages=messages)
        seen.append(first.choices[0].message.content)
        messages += [{"role": "assistant", "content": first.choices[0].message.content},
                     {"role": "user", "content": "go on"}]
        c.chat.completions.create(model=session.model, messages=messages)
        return 1.0

    tok, turns, engine, episode = play(agent, ["<think>a</think> more", "done"])
    assert episode.end == "done" and episode.rewards == [1.0] and episode.forks == 0
    obs = ChatTurns(tok).observation_ids([{"role": "user", "content": "go on"}], turns[0])
    assert episode.ids == turns[0] + obs + turns[1]  # the engine's ids, then the observation's, no re-encoding
    assert episode.observed == [False] * len(turns[0]) + [True] * len(obs) + [False] * len(turns[1])
    assert engine.calls[1] == [episode.prompt_ids + turns[0] + obs]
    assert episode.prompt_ids == ChatTurns(tok).prompt_ids([{"role": "user", "content": "go"}])
    assert seen == ["<think>a</think> more"]


def test_a_summarised_context_forks_a_row_and_both_rows_keep_their_ids():
    def agent(session):
        c = client(session)
        first = c.chat.completions.create(model=session.model, messages=[{"role": "user", "content": "go"}])
        summary = [{"role": "system", "content": "so far: " + first.choices[0].message.content[-5:]},
                   {"role": "user", "content": "continue"}]
        c.chat.completions.create(model=session.model, messages=summary)

    tok, turns, engine, episode = play(agent, ["long answer", "short"])
    assert episode.end == "done" and episode.forks == 1 and [r.ids for r in episode.rows] == turns
    second = episode.rows[1]
    assert second.prompt_ids == ChatTurns(tok).prompt_ids([{"role": "system", "content": "so far: nswer"},
                                                           {"role": "user", "content": "continue"}])
    assert engine.calls[1] == [second.prompt_ids]


def test_tool_calls_come_back_parsed_and_their_results_extend_the_row():
    def agent(session):
        c = client(session)
        messages = [{"role": "user", "content": "go"}]
        reply = c.chat.completions.create(model=session.model, messages=messages, tools=[ADD])
        message = reply.choices[0].message
        assert reply.choices[0].finish_reason == "tool_calls"
        call = message.tool_calls[0]
        assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 1, "b": 2}
        messages += [message.model_dump(exclude_none=True), {"role": "tool", "tool_call_id": call.id, "content": "3"}]
        c.chat.completions.create(model=session.model, messages=messages, tools=[ADD])

    tok, turns, engine, episode = play(agent, [CALL, "#### 3"], template=SHOWS_TOOLS)
    assert episode.end == "done" and episode.forks == 0, episode.failure
    assert episode.ids[:len(turns[0])] == turns[0] and episode.ids[-len(turns[1]):] == turns[1]
    assert "</tool_call>" in engine.stops[0]  # a request with tools stops at its first call (plain default)
    assert "tools: add" in tok.decode(episode.prompt_ids)  # the template showed the request's tool schemas


def test_tokens_after_a_weight_update_carry_the_new_version():
    versions = []

    def agent(session):
        c = client(session)
        messages = [{"role": "user", "content": "go"}]
        for _ in range(2):
            reply = c.chat.completions.create(model=session.model, messages=messages)
            versions.append(reply.system_fingerprint)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "again"}]

    tok, turns, engine, runner = make(agent, ["one", "two"])
    try:
        episode, = runner.run(engine, PROBLEMS, 1, between=lambda: engine.update_weights(None, engine.version + 1))
    finally:
        runner.close()
    assert versions == ["asyncrl-v0", "asyncrl-v1"]
    sampled = [v for v, o in zip(episode.versions, episode.observed) if not o]
    assert sampled == [0] * len(turns[0]) + [1] * len(turns[1])


def test_a_crashing_harness_fails_its_episode_and_the_others_go_on():
    def agent(session):
        c = client(session)
        c.chat.completions.create(model=session.model, messages=[{"role": "user", "content": session.row["uid"]}])
        if session.row["uid"] == "bad":
            raise KeyError("board")
        session.reward(0.5)

    problems = [Problem(uid=u, prompt=u, answer="", solution="", messages=(("user", u),)) for u in ("ok", "bad")]
    tok, turns, engine, runner = make(agent, ["a"])
    engine.script = [[turns[0], turns[0]]]
    try:
        good, bad = runner.run(engine, problems, 1)
    finally:
        runner.close()
    assert good.end == "done" and good.rewards == [0.5]
    assert bad.end == "failed" and bad.failure == "harness raised KeyError: 'board'"


def test_a_harness_that_never_asks_fails_its_episode():
    _, _, _, episode = play(lambda session: 1.0, ["a"])
    assert episode.end == "failed" and episode.failure == "harness returned before its first request"


def test_a_harness_that_goes_silent_fails_after_the_step_timeout():
    def agent(session):
        time.sleep(30)

    limits = EpisodeLimits(max_turns=3, turn_tokens=64, episode_tokens=400, step_timeout_s=0.5)
    _, _, _, episode = play(agent, ["a"], limits=limits)
    assert episode.end == "failed" and "env.step_timeout_s=0.5" in episode.failure


def test_requests_past_max_turns_are_refused_and_the_episode_ends_there():
    refused, finished = [], threading.Event()

    def agent(session):
        c = client(session)
        messages = [{"role": "user", "content": "go"}]
        while True:
            try:
                reply = c.chat.completions.create(model=session.model, messages=messages)
            except openai.BadRequestError as err:
                refused.append(str(err))
                finished.set()
                return 1.0
            messages += [{"role": "assistant", "content": reply.choices[0].message.content},
                         {"role": "user", "content": "more"}]

    _, _, engine, runner = make(agent, ["a", "b", "c"])
    episode, = runner.run(engine, PROBLEMS, 1)
    assert finished.wait(10)  # the refusal reaches the harness after its episode ended
    runner.close()
    assert episode.end == "max_turns" and episode.turns == 3 and len(engine.calls) == 3
    assert "env.max_turns=3" in refused[0]


@pytest.mark.parametrize("extra, needle", [({"temperature": 0.5}, "rollout.temperature=1"),
                                           ({"top_p": 0.9}, "rollout.top_p=1"),
                                           ({"n": 2}, "n=2"),
                                           ({"presence_penalty": 0.5}, "presence_penalty")])
def test_sampling_the_trainer_cannot_honour_is_refused_in_one_line(extra, needle):
    errors = []

    def agent(session):
        c = client(session)
        try:
            c.chat.completions.create(model=session.model, messages=[{"role": "user", "content": "go"}], **extra)
        except openai.BadRequestError as err:
            errors.append(err.body["message"])
        c.chat.completions.create(model=session.model, messages=[{"role": "user", "content": "go"}])

    _, _, _, episode = play(agent, ["a"])
    assert needle in errors[0] and "\n" not in errors[0]
    assert episode.end == "done"  # a refused request is not a turn: the episode went on


def test_text_completions_with_token_ids_extend_the_row():
    def agent(session):
        c = client(session)
        prompt = [5, 6, 7]
        first = c.completions.create(model=session.model, prompt=prompt, max_tokens=8)
        sampled = first.choices[0].model_extra["token_ids"]
        c.completions.create(model=session.model, prompt=prompt + sampled + [8, 9], max_tokens=8)

    tok, turns, engine, episode = play(agent, ["x y", "z"])
    assert episode.forks == 0 and episode.prompt_ids == [5, 6, 7]
    assert episode.ids == turns[0][:8] + [8, 9] + turns[1]
    assert episode.observed == [False] * len(turns[0]) + [True, True] + [False] * len(turns[1])


def test_the_endpoint_listens_on_loopback_and_refuses_after_close():
    urls = []

    def agent(session):
        urls.append(session.base_url)
        client(session).chat.completions.create(model=session.model, messages=[{"role": "user", "content": "go"}])

    _, _, _, runner = make(agent, ["a"])
    engine = ScriptedEngine(runner.tokenizer, [[[5]]])
    runner.run(engine, PROBLEMS, 1)
    assert urls[0].startswith("http://127.0.0.1:")
    runner.close()
    with pytest.raises(openai.APIConnectionError):
        openai.OpenAI(base_url=urls[0], api_key=runner.endpoint.token, max_retries=0, timeout=5).models.list()
