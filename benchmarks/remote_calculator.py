"""A calculator tool answered by a real HTTP service on 127.0.0.1, with a remote service's latency.

As a tool (``env.tools=[remote_calculator:calculator]``, this folder on PYTHONPATH): the same
name, signature and description as asyncrl's built-in ``calculator`` (so a model warm-started to
call that one calls this one), but each call is an HTTP POST to the service whose address is in
$ASYNCRL_REMOTE_CALCULATOR (http://127.0.0.1:PORT), which answers after a lognormal delay.

As a program, it starts the service, runs a command with $ASYNCRL_REMOTE_CALCULATOR set, and stops
the service when the command ends (the benchmark's runs and their rollout workers inherit it):

    python benchmarks/remote_calculator.py --median-s 0.5 --sigma 1 -- asyncrl train --config calculator-agent \
        env.tools=[remote_calculator:calculator] ...
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from asyncrl.envs import calculator as builtin_calculator

ADDRESS = "ASYNCRL_REMOTE_CALCULATOR"


def calculator(expression: str) -> str:
    with urllib.request.urlopen(urllib.request.Request(
            os.environ[ADDRESS] + "/calculate", data=json.dumps({"expression": expression}).encode(),
            headers={"Content-Type": "application/json"}), timeout=60) as reply:
        answer = json.loads(reply.read())
    if "error" in answer:
        raise ValueError(answer["error"])
    return answer["result"]


calculator.__doc__ = builtin_calculator.calculator.__doc__  # what the model sees: the built-in's description


class Delays:
    """Lognormal delays (``median_s`` × e^(σ·z)), from one seeded generator shared by the handlers."""

    def __init__(self, median_s: float, sigma: float, seed: int):
        self.median_s, self.sigma, self.rng, self.lock = median_s, sigma, random.Random(seed), threading.Lock()

    def next(self) -> float:
        with self.lock:
            z = self.rng.gauss(0.0, 1.0)
        return self.median_s * math.exp(self.sigma * z) if self.median_s > 0 else 0.0


def serve(median_s: float, sigma: float, seed: int = 0) -> ThreadingHTTPServer:
    """The service, started in a daemon thread on 127.0.0.1 and a free port."""
    delays = Delays(median_s, sigma, seed)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - the http.server name
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            time.sleep(delays.next())
            try:
                answer = {"result": builtin_calculator.calculator(body.get("expression"))}
            except ValueError as err:
                answer = {"error": str(err)}
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):  # quiet: a request a line would flood the run's log
            pass

    class Server(ThreadingHTTPServer):
        # socketserver's listen queue of 5 drops the connections of a batch's episodes calling at
        # once; their clients' SYN retries (1 s, then 3 s) would be timed as the service's latency
        request_queue_size = 4096

        def handle_error(self, request, client_address):
            # a client gone before its answer (the run ended with episodes in flight) is not an error
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="remote-calculator").start()
    return server


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--median-s", type=float, default=0.5)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    server = serve(args.median_s, args.sigma, args.seed)
    env = {**os.environ, ADDRESS: f"http://127.0.0.1:{server.server_address[1]}"}
    try:
        return subprocess.run(command, env=env).returncode
    finally:
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
