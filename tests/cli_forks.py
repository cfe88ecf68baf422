"""Many `asyncrl` command lines, each in its own process, without paying the imports each time.

``python cli_forks.py`` imports the CLI (and torch, transformers) once, then serves requests on
stdin, one JSON line each: ``{"args": [...], "cwd": DIR, "env": {...}, "prelude": CODE}``. For each
it forks a child that changes to ``cwd``, updates its environment, runs ``prelude`` (a patch, or
nothing) and then ``asyncrl.cli.main(args)``, exactly what ``python -m asyncrl.cli ARGS`` runs (or,
with ``"main": "benchmarks.bench.cli"``, what ``python -m benchmarks ARGS`` runs from the checkout), with
its stdout and stderr in files, and ends as the interpreter does (``atexit`` handlers, then exit). The
child's exit status, stdout and stderr come back on stdout as a JSON line. An exception escaping
``main`` prints its traceback and exits 1, as the interpreter does.

The server is single-threaded when it forks (the imports start no thread it keeps), so each child is
a clean copy. Environment variables read at import time (HF_HUB_OFFLINE, TOKENIZERS_PARALLELISM)
come from the server's own environment, which the caller sets when it starts the server.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]  # the repository: its benchmarks/ package


def _child(request: dict, out: str, err: str) -> None:
    code = 1
    try:
        os.chdir(request["cwd"])
        if request.get("replace_env"):  # the caller's whole environment, as subprocess.run(env=...) gives
            os.environ.clear()
        os.environ.update(request.get("env", {}))
        for fd, path in ((1, out), (2, err)):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.argv = ["asyncrl", *request["args"]]
        if request.get("prelude"):
            exec(request["prelude"], {})
        module = request.get("main", "asyncrl.cli")
        if module.startswith("benchmarks."):  # the apparatus is not installed: it is the checkout's
            sys.path.insert(0, str(CHECKOUT))
        code = importlib.import_module(module).main(request["args"])
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        # what the interpreter runs at exit: multiprocessing's finalizers unlink the run's semaphores,
        # or its resource tracker reports them leaked on this child's stderr after the child is gone
        try:
            atexit._run_exitfuncs()
        except BaseException:
            traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _wait(pid: int, timeout_s: float = 120.0) -> int:
    """The child's wait status; a child still running after ``timeout_s`` is killed (status 9)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.01)
    os.kill(pid, signal.SIGKILL)
    return os.waitpid(pid, 0)[1]


PRELOAD = ("torch", "asyncrl.cli", "asyncrl.runtime.loop", "asyncrl.runtime.validate", "asyncrl.runtime.worker",
           "asyncrl.runtime.sources.lockstep", "asyncrl.runtime.sources.async_source", "asyncrl.rollout.hf_engine",
           "asyncrl.training.trainer", "asyncrl.training.pretrain", "asyncrl.agents.rollout", "asyncrl.config.help")


def serve() -> None:
    import importlib
    import threading

    # what the children need, imported once: the CLI imports the runtime only when a command runs,
    # which would cost each child seconds; none of these imports starts a thread (checked: a fork
    # copies only the forking thread, so a kept thread's locks could be copied held)
    for module in PRELOAD:
        importlib.import_module(module)
    if threading.active_count() != 1:
        raise RuntimeError(f"cli_forks: the preloaded imports started threads: {threading.enumerate()}")

    scratch = tempfile.mkdtemp(prefix="cli-forks-")
    reply = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        out, err = os.path.join(scratch, "out"), os.path.join(scratch, "err")
        reply.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, out, err)
        status = _wait(pid, request.get("timeout", 120))
        reply.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status), "stdout": Path(out).read_text(),
                                "stderr": Path(err).read_text()}) + "\n")
        reply.flush()


class CliForks:
    """The test side: start the server once, then :meth:`run` command lines through it."""

    def __init__(self, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__))], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env)

    def run(self, args: list[str], cwd: Path, env: dict[str, str] | None = None,
            prelude: str = "", timeout: float = 120, replace_env: bool = False,
            main: str = "asyncrl.cli") -> subprocess.CompletedProcess:
        request = {"args": [str(a) for a in args], "cwd": str(cwd), "env": env or {}, "prelude": prelude,
                   "timeout": timeout, "replace_env": replace_env, "main": main}
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the CLI fork server ended (exit {self.proc.wait()})")
        done = json.loads(line)
        return subprocess.CompletedProcess(args, done["returncode"], done["stdout"], done["stderr"])

    def close(self) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


_SHARED: list[CliForks] = []


def shared_forks() -> CliForks:
    """One server per test process, started on first use (with this process's environment) and
    stopped at exit."""
    if not _SHARED:
        _SHARED.append(CliForks(dict(os.environ)))
        atexit.register(_SHARED[0].close)
    return _SHARED[0]


def run_cli(args: list[str], cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 300) -> subprocess.CompletedProcess:
    """What ``subprocess.run([python, "-m", "asyncrl.cli", *args], cwd=cwd, env=env, timeout=...,
    capture_output=True, text=True)`` returns, from a forked process (``env``: the whole
    environment, this process's when None)."""
    return shared_forks().run(args, cwd, dict(os.environ) if env is None else env, timeout=timeout,
                              replace_env=True)


def run_bench(args: list[str], cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 300) -> subprocess.CompletedProcess:
    """What ``python -m benchmarks ARGS`` (run with the checkout on PYTHONPATH) returns, as :func:`run_cli`."""
    env = checkout_env(dict(os.environ) if env is None else env)
    return shared_forks().run(args, cwd, env, timeout=timeout, replace_env=True, main="benchmarks.bench.cli")


def checkout_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (this process's when None) with the checkout first on PYTHONPATH: what a process needs
    to import the benchmark apparatus (``python -m benchmarks``) from any directory."""
    env = dict(os.environ) if env is None else dict(env)
    env["PYTHONPATH"] = os.pathsep.join([str(CHECKOUT), *filter(None, [env.get("PYTHONPATH")])])
    return env


if __name__ == "__main__":
    serve()
