"""The OpenAI-compatible endpoint as its clients see it: the ``openai`` client gets completions,
streams and models through it; the token, the body, the path and the session are checked before the
backend is called; backend errors come back in OpenAI's shape; requests run in parallel; and close()
answers a request still in the backend with 503 and then refuses connections."""

from __future__ import annotations

import copy
import http.client
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

openai = pytest.importorskip("openai")

from asyncrl.agents.endpoint import Endpoint, EndpointError  # noqa: E402

TOOL_CALLS = [
    {"id": "call_1", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}},
    {"id": "call_2", "type": "function", "function": {"name": "scale", "arguments": '{"x": 1.5}'}},
]
LOGPROBS = {"content": [{"token": "Let", "logprob": -0.25, "bytes": [76, 101, 116], "top_logprobs": []},
                        {"token": " me", "logprob": -0.5, "bytes": [32, 109, 101], "top_logprobs": []}]}
USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
CHAT = {
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1700000000, "model": "policy",
    "choices": [{"index": 0, "finish_reason": "tool_calls", "logprobs": LOGPROBS,
                 "message": {"role": "assistant", "content": "Let me add.", "tool_calls": TOOL_CALLS}}],
    "usage": USAGE,
}
TEXT = {
    "id": "cmpl-1", "object": "text_completion", "created": 1700000000, "model": "policy",
    "choices": [{"index": 0, "text": " 5", "finish_reason": "stop", "logprobs": None}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
MESSAGES = [{"role": "user", "content": "2 + 3?"}]
STOPPED = "the run has stopped; this endpoint takes no more requests"


class FakeBackend:
    """Records every call; answers the canned responses, or raises ``fail``, or first waits on
    ``gate`` (after setting ``entered``) or on ``barrier``."""

    def __init__(self):
        self.calls: list[tuple[str, str | None, dict | None]] = []
        self.lock = threading.Lock()
        self.fail: BaseException | None = None
        self.gate: threading.Event | None = None
        self.entered = threading.Event()
        self.barrier: threading.Barrier | None = None

    def _call(self, kind, session, body, answer):
        with self.lock:
            self.calls.append((kind, session, body))
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(10)
        if self.barrier is not None:
            self.barrier.wait()
        if self.fail is not None:
            raise self.fail
        return copy.deepcopy(answer)

    def chat(self, session, body):
        return self._call("chat", session, body, CHAT)

    def complete(self, session, body):
        return self._call("complete", session, body, TEXT)

    def models(self):
        self._call("models", None, None, None)
        return ["policy", "policy-ref"]


@pytest.fixture
def backend():
    return FakeBackend()


@pytest.fixture
def ep(backend):
    with Endpoint(backend) as endpoint:
        yield endpoint


def client(ep, session="abc", **kwargs):
    kwargs.setdefault("base_url", ep.base_url(session))
    kwargs.setdefault("api_key", ep.token)
    return openai.OpenAI(max_retries=0, timeout=5, **kwargs)


def raw(ep, method, path, body=None, headers=None, auth=True):
    """One request over http.client: (status, parsed JSON body or None, headers)."""
    conn = http.client.HTTPConnection(ep.host, ep.port, timeout=5)
    try:
        sent = dict(headers or {})
        if auth:
            sent.setdefault("Authorization", f"Bearer {ep.token}")
        if isinstance(body, dict):
            body = json.dumps(body)
        conn.request(method, path, body=body, headers=sent)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, (json.loads(data) if data else None), resp
    finally:
        conn.close()


def assert_error(status, body, resp, expected_status, message=None):
    assert status == expected_status
    assert resp.getheader("Content-Type") == "application/json"
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == ("server_error" if expected_status >= 500 else "invalid_request_error")
    if message is not None:
        assert error["message"] == message
    return error


def test_openai_client_chat_completion_and_models(ep, backend):
    c = client(ep)
    out = c.chat.completions.create(model="policy", messages=MESSAGES, tools=TOOLS, temperature=0.5)
    assert out.id == "chatcmpl-1" and out.choices[0].message.content == "Let me add."
    assert [t.function.name for t in out.choices[0].message.tool_calls] == ["add", "scale"]
    assert out.choices[0].logprobs.content[1].token == " me"
    assert out.usage.total_tokens == 18
    kind, session, body = backend.calls[0]
    assert (kind, session) == ("chat", "abc")
    assert body["messages"] == MESSAGES and body["tools"] == TOOLS and body["temperature"] == 0.5

    text = c.completions.create(model="policy", prompt="2 + 3 =", max_tokens=4)
    assert text.choices[0].text == " 5" and text.choices[0].finish_reason == "stop"
    assert backend.calls[1][:2] == ("complete", "abc") and backend.calls[1][2]["prompt"] == "2 + 3 ="

    assert [m.id for m in c.models.list()] == ["policy", "policy-ref"]


def test_openai_client_chat_stream_rebuilds_the_message(ep, backend):
    stream = client(ep, session="ep-7_x").chat.completions.create(
        model="policy", messages=MESSAGES, tools=TOOLS, stream=True)
    content, calls, tokens, finish, ids = "", {}, [], None, set()
    for chunk in stream:
        ids.add((chunk.id, chunk.model, chunk.object))
        assert chunk.usage is None  # not asked for
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                into = calls.setdefault(call.index, {"id": None, "name": "", "arguments": ""})
                into["id"] = call.id or into["id"]
                into["name"] += call.function.name or ""
                into["arguments"] += call.function.arguments or ""
            if choice.logprobs is not None:
                tokens += [t.token for t in choice.logprobs.content]
            finish = choice.finish_reason or finish
    assert ids == {("chatcmpl-1", "policy", "chat.completion.chunk")}
    assert content == CHAT["choices"][0]["message"]["content"]
    assert [calls[i] for i in sorted(calls)] == [
        {"id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}
        for c in TOOL_CALLS]
    assert tokens == ["Let", " me"] and finish == "tool_calls"
    assert backend.calls[0][1] == "ep-7_x" and backend.calls[0][2]["stream"] is True


def test_stream_include_usage_ends_with_a_usage_chunk(ep):
    chunks = list(client(ep).chat.completions.create(
        model="policy", messages=MESSAGES, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == 18
    assert all(chunk.usage is None for chunk in chunks[:-1])


def test_completion_stream(ep, backend):
    chunks = list(client(ep).completions.create(model="policy", prompt="2 + 3 =", stream=True))
    assert "".join(c.choices[0].text for c in chunks) == " 5"
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_stream_is_server_sent_events_ending_in_done(ep):
    conn = http.client.HTTPConnection(ep.host, ep.port, timeout=5)
    body = json.dumps({"messages": MESSAGES, "stream": True})
    conn.request("POST", "/s/abc/v1/chat/completions", body=body, headers={"Authorization": f"Bearer {ep.token}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("Content-Type") == "text/event-stream"
    events = [e for e in resp.read().decode().split("\n\n") if e]
    conn.close()
    assert all(e.startswith("data: ") for e in events) and events[-1] == "data: [DONE]"
    first = json.loads(events[0][6:])["choices"][0]["delta"]
    assert first["role"] == "assistant" and [c["index"] for c in first["tool_calls"]] == [0, 1]


def test_session_from_header_on_unscoped_path(ep, backend):
    c = client(ep, base_url=f"{ep.url}/v1", default_headers={"X-Asyncrl-Session": "hdr-1"})
    assert c.chat.completions.create(model="policy", messages=MESSAGES).id == "chatcmpl-1"
    assert backend.calls[0][:2] == ("chat", "hdr-1")
    # /v1/models needs no session
    assert [m.id for m in client(ep, base_url=f"{ep.url}/v1").models.list()] == ["policy", "policy-ref"]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}])
def test_wrong_or_missing_token_is_401_and_never_reaches_the_backend(ep, backend, headers):
    message = "missing or wrong API key (the run's token: the api_key the episode was given)"
    status, body, resp = raw(ep, "POST", "/s/abc/v1/chat/completions", {"messages": MESSAGES}, headers,
                             auth=False)
    assert_error(status, body, resp, 401, message)
    status, body, resp = raw(ep, "GET", "/v1/models", headers=headers, auth=False)
    assert_error(status, body, resp, 401, message)
    with pytest.raises(openai.AuthenticationError):
        client(ep, api_key="not-the-token").chat.completions.create(model="policy", messages=MESSAGES)
    assert backend.calls == []


def test_bad_requests(backend):
    with Endpoint(backend, max_body_bytes=1000) as ep:
        path = "/s/abc/v1/chat/completions"
        status, body, resp = raw(ep, "POST", path, b"{not json")
        error = assert_error(status, body, resp, 400)
        assert error["message"].startswith("body is not JSON: Expecting property name")
        status, body, resp = raw(ep, "POST", path, b"")
        assert_error(status, body, resp, 400, "body is not JSON: Expecting value: line 1 column 1 (char 0)")
        status, body, resp = raw(ep, "POST", path, b"[1, 2]")
        assert_error(status, body, resp, 400, "body is not a JSON object: it is an array")
        status, body, resp = raw(ep, "POST", path, {"messages": [{"role": "user", "content": "x" * 5000}]})
        assert "limit (1000 bytes)" in assert_error(status, body, resp, 413)["message"]
        # a body too big for the socket buffers: the client still gets the 413, not a broken pipe
        status, body, resp = raw(ep, "POST", path, b"x" * 5_000_000)
        assert "(5000000 bytes)" in assert_error(status, body, resp, 413)["message"]
        status, body, resp = raw(ep, "POST", "/s/abc/v2/chat/completions", {"messages": MESSAGES})
        assert_error(status, body, resp, 404)
        status, body, resp = raw(ep, "POST", "/s/a.b/v1/chat/completions", {"messages": MESSAGES})
        assert_error(status, body, resp, 404)
        status, body, resp = raw(ep, "GET", path)
        assert_error(status, body, resp, 405)
        status, body, resp = raw(ep, "POST", "/v1/chat/completions", {"messages": MESSAGES})
        assert_error(status, body, resp, 400, "no session: use the episode's base_url (/s/<session>/v1) "
                                              "or the X-Asyncrl-Session header")
        status, body, resp = raw(ep, "POST", "/v1/completions", {"prompt": "x"}, {"X-Asyncrl-Session": "a b"})
        assert_error(status, body, resp, 400)
        conn = http.client.HTTPConnection(ep.host, ep.port, timeout=5)
        conn.putrequest("POST", path)  # no Content-Length
        conn.putheader("Authorization", f"Bearer {ep.token}")
        conn.endheaders()
        resp = conn.getresponse()
        assert_error(resp.status, json.loads(resp.read()), resp, 411)
        conn.close()
        # query strings are ignored
        assert raw(ep, "POST", path + "?x=1", {"messages": MESSAGES})[0] == 200
    assert [call[0] for call in backend.calls] == ["chat"]


def test_backend_errors_come_back_in_openai_shape_and_serving_goes_on(ep, backend):
    backend.fail = EndpointError(422, "max_tokens must be positive", param="max_tokens", code="bad_value")
    with pytest.raises(openai.UnprocessableEntityError) as caught:
        client(ep).chat.completions.create(model="policy", messages=MESSAGES, max_tokens=-1)
    assert caught.value.status_code == 422 and caught.value.body["message"] == "max_tokens must be positive"
    status, body, resp = raw(ep, "POST", "/s/abc/v1/completions", {"prompt": "x"})
    error = assert_error(status, body, resp, 422, "max_tokens must be positive")
    assert (error["param"], error["code"]) == ("max_tokens", "bad_value")

    backend.fail = RuntimeError("boom: the engine died\nTraceback (most recent call last): ...")
    status, body, resp = raw(ep, "POST", "/s/abc/v1/chat/completions", {"messages": MESSAGES, "stream": True})
    assert_error(status, body, resp, 500, "RuntimeError: boom: the engine died")
    assert "Traceback" not in json.dumps(body)

    backend.fail = None
    assert client(ep).chat.completions.create(model="policy", messages=MESSAGES).id == "chatcmpl-1"


def test_binds_loopback_by_default_and_logs_nothing(ep, capfd):
    assert ep.url == f"http://127.0.0.1:{ep.port}" and ep.port > 0
    assert ep._server.socket.getsockname()[0] == "127.0.0.1"
    assert ep.base_url("abc") == f"http://127.0.0.1:{ep.port}/s/abc/v1"
    client(ep).models.list()
    raw(ep, "GET", "/nowhere")
    raw(ep, "GET", "/v1/models", auth=False)
    assert capfd.readouterr().err == ""
    assert len(Endpoint(None).token) >= 32 and Endpoint(None).token != Endpoint(None).token


def test_ipv6_url_in_brackets(backend):
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with Endpoint(backend, host="::1") as ep:
        assert ep.url == f"http://[::1]:{ep.port}"
        assert [m.id for m in client(ep).models.list()] == ["policy", "policy-ref"]


def test_close_answers_a_blocked_request_503_then_refuses_connections(backend):
    ep = Endpoint(backend).start()
    backend.gate = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(raw, ep, "POST", "/s/abc/v1/chat/completions", {"messages": MESSAGES})
        assert backend.entered.wait(5)
        began = time.monotonic()
        ep.close()
        assert time.monotonic() - began < 3  # close() did not wait for the backend
        status, body, resp = pending.result(5)
    assert_error(status, body, resp, 503, STOPPED)
    backend.gate.set()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((ep.host, ep.port), timeout=2).close()
    with pytest.raises(openai.APIConnectionError):
        client(ep).models.list()
    ep.close()  # twice is fine
    assert not any(t.name == "asyncrl-endpoint" and t.is_alive() for t in threading.enumerate())


def test_close_before_start_and_context_manager(backend):
    ep = Endpoint(backend)
    ep.close()
    ep.close()
    with pytest.raises(RuntimeError):
        ep.start()
    with Endpoint(backend) as ep:
        port = ep.port
        assert any(t.name == "asyncrl-endpoint" and t.is_alive() for t in threading.enumerate())
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_requests_are_served_in_parallel(ep, backend):
    backend.barrier = threading.Barrier(8, timeout=5)  # breaks (500s) unless all 8 are in at once

    def one(i):
        return client(ep, session=f"s{i}").chat.completions.create(model="policy", messages=MESSAGES).id

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(one, range(8), timeout=10)) == ["chatcmpl-1"] * 8
    assert sorted(call[1] for call in backend.calls) == [f"s{i}" for i in range(8)]


def test_a_burst_of_connections_waits_in_the_listen_queue():
    """Hundreds of harnesses connect at once when a batch starts: the kernel holds their connections
    until the server accepts them (a queue of 5 left the rest to time out connecting)."""
    from asyncrl.agents.endpoint import _Server

    server = _Server(("127.0.0.1", 0), Endpoint(FakeBackend()))  # listening, nobody accepting yet
    socks = []
    try:
        for _ in range(300):
            socks.append(socket.create_connection(server.server_address[:2], timeout=2))
    finally:
        for sock in socks:
            sock.close()
        server.server_close()
    assert len(socks) == 300
