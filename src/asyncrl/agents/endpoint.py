"""An OpenAI-compatible HTTP endpoint for agent harnesses during RL training (transport only).

A harness written against the ``openai`` client reaches the policy through it:
``openai.OpenAI(base_url=ep.base_url(session), api_key=ep.token)``. The server knows nothing about
models: it parses HTTP, checks the run's bearer token, routes, and hands each request to a duck-typed
*backend*: ``chat(session, body) -> dict`` (``POST .../chat/completions``, a ``chat.completion``),
``complete(session, body) -> dict`` (``POST .../completions``, a ``text_completion``) and
``models() -> list[str]`` (``GET .../models``). Paths are ``/s/<session>/v1/...``, or ``/v1/...``
with the session in the ``X-Asyncrl-Session`` header. A backend call blocks while the model
generates, so every request has its own thread. A backend refuses a request by raising
:class:`EndpointError`; any other exception is a 500 with a one-line message, never a traceback.
With ``"stream": true`` the backend's complete answer is replayed as the server-sent events OpenAI
would have streamed. Every response closes its connection.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
import socket
import socketserver
import threading
import time
from contextlib import suppress
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from asyncrl.core.user_code import first_line

__all__ = ["Endpoint", "EndpointError"]

log = logging.getLogger(__name__)

STOPPED = "the run has stopped; this endpoint takes no more requests"
NO_KEY = "missing or wrong API key (the run's token: the api_key the episode was given)"
NO_SESSION = "no session: use the episode's base_url (/s/<session>/v1) or the X-Asyncrl-Session header"
_SESSION = re.compile(r"[A-Za-z0-9_-]+")
_ROUTE = re.compile(r"(?:/s/(?P<session>[A-Za-z0-9_-]+))?/v1/(?P<what>chat/completions|completions|models)")
_METHOD = {"chat/completions": "POST", "completions": "POST", "models": "GET"}
# After answering a request whose body was never read (401, 413...), how long to swallow that body.
_LINGER_S = 2.0


class EndpointError(Exception):
    """A request the backend refuses: HTTP status and one-line message, sent as OpenAI's error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def _http(status: int, headers: dict[str, str], body: bytes) -> bytes:
    """A whole HTTP/1.1 response, built first: one write sends it, by whichever of the request's
    thread and close() answers."""
    phrase = BaseHTTPRequestHandler.responses.get(status, ("Error",))[0]
    head = [f"HTTP/1.1 {status} {phrase}", *(f"{k}: {v}" for k, v in headers.items()), "Connection: close"]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _json(status: int, payload: Any) -> bytes:
    body = json.dumps(payload).encode()
    return _http(status, {"Content-Type": "application/json", "Content-Length": str(len(body))}, body)


def _error(err: EndpointError) -> bytes:
    kind = "server_error" if err.status >= 500 else "invalid_request_error"
    error = {"message": err.message, "type": kind, "param": err.param, "code": err.code}
    return _json(err.status, {"error": error})


def _sse(events: list[dict]) -> bytes:
    """Server-sent events without a Content-Length: the body ends when the connection closes."""
    data = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
    return _http(200, {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}, data.encode())


def _delta(message: dict) -> dict:
    """A chat message as the one delta that carries all of it: role, content, tool calls (each with
    its ``index``, as streamed tool calls are assembled by index), and any other field a backend adds
    (``reasoning_content``, ``refusal``)."""
    delta = {"role": "assistant", "content": message.get("content") or ""}
    delta.update({k: v for k, v in message.items()
                  if k not in ("role", "content", "tool_calls") and v is not None})
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, "id": call.get("id"), "type": call.get("type", "function"),
                                "function": dict(call.get("function") or {})}
                               for i, call in enumerate(message["tool_calls"])]
    return delta


def _chunks(chat: bool, response: dict, body: dict) -> list[dict]:
    """The chunks OpenAI would have streamed for a complete ``response``: per choice, one with all
    of its content (and its logprobs), one with its finish_reason; then, if the request's
    ``stream_options.include_usage`` asked, one with no choices and the usage."""
    options = body.get("stream_options")
    with_usage = isinstance(options, dict) and bool(options.get("include_usage"))
    head = {k: response[k] for k in ("id", "created", "model", "system_fingerprint") if k in response}
    head["object"] = "chat.completion.chunk" if chat else "text_completion"
    if with_usage:  # as OpenAI does: every chunk but the last has "usage": null
        head["usage"] = None
    events = []
    for n, choice in enumerate(response.get("choices") or []):
        index = choice.get("index", n)
        first = {"index": index, "logprobs": choice.get("logprobs"), "finish_reason": None}
        last = {"index": index, "logprobs": None, "finish_reason": choice.get("finish_reason")}
        if chat:
            first["delta"], last["delta"] = _delta(choice.get("message") or {}), {}
        else:
            first["text"], last["text"] = choice.get("text") or "", ""
        events += [{**head, "choices": [first]}, {**head, "choices": [last]}]
    if with_usage:
        events.append({**head, "choices": [], "usage": response.get("usage")})
    return events


class _Handler(BaseHTTPRequestHandler):
    """One connection, one request (``Connection: close``): no keep-alive state for close() to race.

    Exactly one of the request's own thread and close() writes its response, whichever claims it
    first (:meth:`_send`); the other writes nothing."""

    protocol_version = "HTTP/1.1"
    server_version = "asyncrl-endpoint"
    timeout = 60  # a client that stops sending mid-request does not hold its thread forever
    server: _Server
    _body_read = False

    def log_message(self, format: str, *args: Any) -> None:
        """Silent: a line per request on stderr would drown a training run's output."""

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Requests too malformed to route (bad request line, unknown method) in OpenAI's shape too."""
        self.close_connection = True
        with suppress(OSError):
            self.wfile.write(_error(EndpointError(code, message or self.responses.get(code, ("Error",))[0])))

    def do_GET(self) -> None:
        self._serve()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_OPTIONS = do_GET

    def _serve(self) -> None:
        self.close_connection = True
        self._claim, self._answered = threading.Lock(), False
        endpoint = self.server.endpoint
        with endpoint._lock:  # admitted (so that close() answers it if need be), or 503 at once
            if admitted := not endpoint._closing:
                endpoint._pending.add(self)
        try:
            self._send(self._answer(endpoint) if admitted else _error(EndpointError(503, STOPPED)))
        finally:
            with endpoint._lock:
                endpoint._pending.discard(self)
        self._drain()

    def _send(self, response: bytes) -> bool:
        """Write ``response`` unless this request was answered already (False then)."""
        with self._claim:
            if self._answered:
                return False
            self._answered = True
        with suppress(OSError):  # the client has gone: nobody is left to tell
            self.wfile.write(response)
        return True

    def _answer(self, endpoint: Endpoint) -> bytes:
        """The whole response to this request: the backend's answer, or the error in OpenAI's shape."""
        try:
            return self._route(endpoint)
        except EndpointError as err:
            return _error(err)
        except Exception as err:  # a backend bug: answer it, keep serving, leave the traceback out
            log.debug("endpoint: %s %s failed", self.command, self.path, exc_info=True)
            return _error(EndpointError(500, first_line(err)))

    def _route(self, endpoint: Endpoint) -> bytes:
        if not self._authorized(endpoint.token):  # before the body: a stranger's body is never read
            raise EndpointError(401, NO_KEY, code="invalid_api_key")
        path = urlsplit(self.path).path
        match = _ROUTE.fullmatch(path)
        if match is None:
            raise EndpointError(404, f"no such path: {path} (paths are /s/<session>/v1/chat/completions, "
                                     "/s/<session>/v1/completions and /s/<session>/v1/models)")
        what = match["what"]
        if self.command != _METHOD[what]:
            raise EndpointError(405, f"{what} takes {_METHOD[what]}, not {self.command}")
        if what == "models":
            return _json(200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "asyncrl"}
                for m in endpoint.backend.models()]})
        session = match["session"] or self._header_session()
        body = self._read_body(endpoint.max_body_bytes)
        if endpoint._closing:  # close() has answered this request already: spare the backend
            raise EndpointError(503, STOPPED)
        chat = what == "chat/completions"
        response = (endpoint.backend.chat if chat else endpoint.backend.complete)(session, body)
        return _sse(_chunks(chat, response, body)) if body.get("stream") is True else _json(200, response)

    def _authorized(self, token: str) -> bool:
        scheme, _, given = (self.headers.get("Authorization") or "").partition(" ")
        # compare_digest: how long a wrong key took to refuse says nothing about the right one
        return scheme.lower() == "bearer" and secrets.compare_digest(
            given.strip().encode("utf-8", "replace"), token.encode())

    def _header_session(self) -> str:
        session = self.headers.get("X-Asyncrl-Session")
        if not session:
            raise EndpointError(400, NO_SESSION)
        if not _SESSION.fullmatch(session):
            raise EndpointError(400, f"bad X-Asyncrl-Session {session!r}: letters, digits, _ and - only")
        return session

    def _read_body(self, limit: int) -> dict:
        """The request's JSON object, read only when its declared size is within ``limit``."""
        length = self.headers.get("Content-Length")
        if length is None or "Transfer-Encoding" in self.headers:
            raise EndpointError(411, "send the body with a Content-Length (chunked bodies are not taken)")
        if not length.strip().isdigit():
            raise EndpointError(400, f"bad Content-Length: {length!r}")
        if (size := int(length)) > limit:
            raise EndpointError(413, f"the body ({size} bytes) is over this endpoint's limit ({limit} bytes)")
        raw = self.rfile.read(size)
        self._body_read = True
        if len(raw) < size:
            raise EndpointError(400, f"the body ended after {len(raw)} of its {size} bytes")
        try:
            body = json.loads(raw)
        except ValueError as err:  # JSONDecodeError, or bytes in no UTF encoding
            raise EndpointError(400, f"body is not JSON: {err}") from None
        if not isinstance(body, dict):
            kind = {list: "an array", str: "a string", bool: "a boolean"}.get(type(body), "a number or null")
            raise EndpointError(400, f"body is not a JSON object: it is {kind}")
        return body

    def _drain(self) -> None:
        """Swallow a body nobody read (a 401, 413...) for a while: closing a socket with unread bytes
        sends a reset, and a client still sending its body would get a broken pipe, not our answer."""
        declared = self.headers.get("Content-Length", "0").strip() not in ("", "0")
        if self._body_read or not (declared or "Transfer-Encoding" in self.headers):
            return
        with suppress(OSError):  # the timeout included
            self.connection.shutdown(socket.SHUT_WR)
            deadline = time.monotonic() + _LINGER_S
            while (left := deadline - time.monotonic()) > 0:
                self.connection.settimeout(left)
                if not self.connection.recv(1 << 16):
                    break


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a request blocked in the backend never keeps the process alive,
    block_on_close = False  # ... nor stalls close(), which answers such requests itself
    # every episode's harness connects at once when a batch starts (hundreds, on a loaded machine);
    # socketserver's default queue of 5 drops the rest's SYNs, and a client whose connect times out
    # (the openai client's: 5 s) fails its episode
    request_queue_size = 4096

    def __init__(self, address: tuple[str, int], endpoint: Endpoint):
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.endpoint = endpoint
        super().__init__(address, _Handler)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup of the host (getfqdn), which can stall."""
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a client that hangs up mid-request is routine, not worth a traceback on stderr."""
        log.debug("endpoint: connection from %s failed", client_address, exc_info=True)


class Endpoint:
    """An OpenAI-compatible HTTP server in front of ``backend`` (see the module's docstring).

    ``token`` is the run's bearer token (the harness's ``api_key``; None: a random one). It binds on
    :meth:`start` (``port`` 0: a free port). A context manager: start, then close."""

    def __init__(self, backend: Any, *, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 max_body_bytes: int = 16 << 20):
        if token == "":
            raise ValueError("an empty token would let anyone in: give one, or None for a random one")
        self.backend = backend
        self.host, self.port = host, port
        self.token = secrets.token_urlsafe(24) if token is None else token
        self.max_body_bytes = max_body_bytes
        self._lock = threading.Lock()  # guards _closing and _pending together
        self._closing = False
        self._pending: set[_Handler] = set()  # requests admitted, not yet answered by their thread
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> Endpoint:
        """Bind and serve on a daemon thread named ``asyncrl-endpoint``."""
        with self._lock:
            if self._closing or self._server is not None:
                raise RuntimeError("this endpoint was started already (an Endpoint serves once)")
            self._server = _Server((self.host, self.port), self)
        self.host, self.port = self._server.server_address[:2]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="asyncrl-endpoint", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` as bound (an IPv6 host in brackets)."""
        if self._server is None:
            raise RuntimeError("the endpoint has no address until start()")
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def base_url(self, session: str) -> str:
        """What an OpenAI client of episode ``session`` takes as its ``base_url``."""
        return f"{self.url}/s/{session}/v1"

    def close(self) -> None:
        """Stop: from now on every request is answered 503 (those in the backend too, whose answer
        is dropped when it comes), then stop serving and close the socket. Idempotent."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
            pending = list(self._pending)
        for request in pending:  # in the backend still: answer now, drop the backend's answer later
            if request._send(_error(EndpointError(503, STOPPED))):
                with suppress(OSError):
                    request.connection.shutdown(socket.SHUT_RDWR)
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Endpoint:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
