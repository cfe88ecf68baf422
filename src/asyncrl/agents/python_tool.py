"""The ``python`` tool: the model's code run in a child Python process, sandboxed and under limits.

The model's code is adversarial input (RL finds whatever its environment allows). By default
(``PythonLimits.sandbox="bubblewrap"``) it runs in a bubblewrap sandbox (:mod:`asyncrl.agents.sandbox`):
a read-only view of only the system and the interpreter, a fresh in-memory ``/tmp`` per call, its
own PID and network namespaces (the host's loopback unreachable; nothing outlives the call), an
empty environment, no capabilities, and as root a uid of its own. Where bubblewrap cannot start,
building the tool fails in one line naming ``env.python_sandbox=none``.

Inside, before the model's code runs, a bootstrap sets the limits: CPU time (``RLIMIT_CPU``;
SIGXCPU, then SIGKILL a second later), address space (``RLIMIT_AS``: an allocation past it is a
``MemoryError``), processes and threads (``RLIMIT_NPROC``), the size of any file written
(``RLIMIT_FSIZE``), no core files. The interpreter is ``python -I -S`` (the standard library only;
``PythonLimits.site_packages`` adds the trainer's installed packages, read-only). A wall-clock limit
kills the call; output (stdout and stderr together) is cut to ``output_chars``.

``sandbox="none"`` runs the code **unsandboxed**, as the trainer's own user with its filesystem:
only the limits above, a scratch working directory, an empty environment, and a best-effort block
of the network (a new user + network namespace where the kernel allows one; else Python's socket
module disabled, which ``ctypes`` gets around). docs/security.md lists what that mode does not stop.
"""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

from asyncrl.agents.sandbox import SandboxSpec, SandboxUnavailable, check_sandbox, sandbox_argv, sandbox_uid
from asyncrl.agents.tools import Tool, ToolError

__all__ = ["SANDBOXES", "PythonLimits", "network_isolation", "python", "python_tool", "run_python"]

SANDBOXES = ("bubblewrap", "none")
FILE_SIZE_BYTES = 16 * 2**20
NPROC_IN_SANDBOX = 16
NPROC_IN_NAMESPACE = 64
MAX_CODE_CHARS = 100_000  # the code travels as one argument: the kernel limits those to 128 KiB

# Runs first in the child, before the model's code: unshare (or disable sockets) when unsandboxed, set the limits,
# then exec the code as __main__. A script, not a preexec_fn: a preexec_fn is unsafe in a parent
# with threads (the ToolBox runs each call in one), and unshare(CLONE_NEWUSER) needs a process with
# a single thread, which a freshly started interpreter is.
_BOOTSTRAP = r"""
import json, os, resource, sys
cfg = json.loads(sys.argv[1]); code = sys.argv[2]
if cfg["namespace"]:
    uid, gid = os.getuid(), os.getgid()
    if hasattr(os, "unshare"):
        os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)
    else:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
            sys.stderr.write("sandbox: unshare failed: %s\n" % os.strerror(ctypes.get_errno()))
            sys.exit(70)
    try:  # keep our own ids inside (else 'nobody'): getpwuid, expanduser work as outside
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    except OSError:
        pass
def limit(name, soft, hard=None):
    if hasattr(resource, name):
        resource.setrlimit(getattr(resource, name), (soft, soft if hard is None else hard))
limit("RLIMIT_CPU", cfg["cpu_s"], cfg["cpu_s"] + 1)
limit("RLIMIT_AS", cfg["memory_bytes"])
limit("RLIMIT_FSIZE", cfg["fsize_bytes"])
limit("RLIMIT_CORE", 0)
limit("RLIMIT_NPROC", cfg["nproc"])
if cfg["patch_sockets"]:
    import socket, _socket
    def _refused(*args, **kwargs):
        raise PermissionError(13, "network access is disabled in this sandbox")
    class _NoSocket(socket.socket):
        def __init__(self, *args, **kwargs):
            _refused()
    for module in (socket, _socket):
        for name in ("socket", "SocketType"):
            if hasattr(module, name):
                setattr(module, name, _NoSocket)
        for name in ("socketpair", "fromfd", "create_connection", "create_server", "getaddrinfo",
                     "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo", "fromshare"):
            if hasattr(module, name):
                setattr(module, name, _refused)
    del socket, _socket
import types
main = types.ModuleType("__main__")  # the code's own module: 'import __main__' and pickle find it
sys.modules["__main__"], sys.argv = main, ["<code>"]
try:
    exec(compile(code, "<code>", "exec"), main.__dict__)
except SystemExit:
    raise
except BaseException as err:
    import traceback
    traceback.print_exception(type(err), err, err.__traceback__.tb_next)  # not this script's frame
    sys.exit(1)
"""

_PROBE = r"""
import ctypes, os
if hasattr(os, "unshare"):
    os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNET)
elif ctypes.CDLL(None, use_errno=True).unshare(0x10000000 | 0x40000000) != 0:
    raise SystemExit(1)
"""


@dataclass(frozen=True)
class PythonLimits:
    """The ``python`` tool's limits: CPU seconds, address space (MiB) per process, wall-clock
    seconds, and characters of output kept. ``site_packages``: let the code import what the
    trainer's environment has installed (numpy, sympy), not only the standard library.
    ``sandbox``: ``bubblewrap`` or ``none`` (unsandboxed: see the module docstring);
    ``scratch_mb``: the size of the sandbox's in-memory ``/tmp``."""

    cpu_s: int = 5
    memory_mb: int = 512
    wall_s: float = 10.0
    output_chars: int = 4000
    site_packages: bool = False
    sandbox: str = "bubblewrap"
    scratch_mb: int = 64

    def __post_init__(self):
        if self.sandbox not in SANDBOXES:
            raise ValueError(f"python_sandbox: {self.sandbox!r} is not one of {', '.join(SANDBOXES)}")


_ISOLATION: str | None = None
_ISOLATION_LOCK = threading.Lock()


def network_isolation() -> str:
    """``"namespace"`` if a child may enter a new user + network namespace here, else
    ``"socket-patch"`` (see the module docstring for what each guarantees). Tried once in a child
    (the answer is a property of the kernel and its settings) and kept for the process."""
    global _ISOLATION
    with _ISOLATION_LOCK:
        if _ISOLATION is None:
            mode = "socket-patch"
            if sys.platform.startswith("linux"):
                try:
                    probe = subprocess.run([sys.executable, "-I", "-S", "-c", _PROBE], stdin=subprocess.DEVNULL,
                                           capture_output=True, timeout=30, env={})
                    mode = "namespace" if probe.returncode == 0 else mode
                except (OSError, subprocess.TimeoutExpired):
                    pass
            _ISOLATION = mode
        return _ISOLATION


def _read_bounded(proc: subprocess.Popen, deadline: float, keep_bytes: int) -> tuple[bytes, bytes, int, bool]:
    """The child's output until it closes it or ``deadline``: ``(head, tail, bytes dropped
    between them, reached the deadline)``. Read as it comes and kept bounded, so a child printing
    in a loop cannot fill the trainer's memory; head and tail both, for a traceback after a flood."""
    head, tail, dropped = bytearray(), bytearray(), 0
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(head), bytes(tail), dropped, True
            if not selector.select(timeout=remaining):
                continue
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return bytes(head), bytes(tail), dropped, False
            take = min(len(chunk), keep_bytes - len(head))
            head += chunk[:take]
            tail += chunk[take:]
            if len(tail) > keep_bytes:
                dropped += len(tail) - keep_bytes
                del tail[:len(tail) - keep_bytes]


def _format_output(head: bytes, tail: bytes, dropped: int, limit: int) -> str:
    """The output as text, at most ``limit`` characters (plus a marker): its start and its end."""
    text_head, text_tail = head.decode("utf-8", "replace"), tail.decode("utf-8", "replace")
    if not dropped and len(text_head) + len(text_tail) <= limit:
        return text_head + text_tail
    keep_head = limit // 2
    cut_chars = max(0, len(text_head) - keep_head) + max(0, len(text_tail) - (limit - keep_head))
    # the dropped middle was never decoded: counted in bytes, which are chars for ASCII output
    what = f"about {cut_chars + dropped}" if dropped else f"{cut_chars}"
    return text_head[:keep_head] + f"\n…[output cut: {what} chars]…\n" + text_tail[-(limit - keep_head):]


def _status(returncode: int | None, limits: PythonLimits, wall_killed: bool) -> str:
    """One line about how the child ended, '' for a clean exit."""
    if wall_killed:
        return f"[killed: wall-clock limit ({limits.wall_s:g} s)]"
    if returncode == 0:
        return ""
    if returncode is not None and returncode < 0:
        sig = -returncode
        if sig == signal.SIGXCPU:
            return f"[killed: CPU time limit ({limits.cpu_s} s)]"
        if sig == signal.SIGKILL:  # the hard CPU limit (a second past the soft one) or the OOM killer
            return f"[killed: SIGKILL (CPU time limit of {limits.cpu_s} s, or out of memory)]"
        if sig == getattr(signal, "SIGXFSZ", None):
            return f"[killed: file size limit ({FILE_SIZE_BYTES // 2**20} MiB)]"
        return f"[killed by signal {signal.Signals(sig).name}]"
    return f"[exit status {returncode}]"


def run_python(code: str, limits: PythonLimits) -> str:
    """Run ``code`` in the sandbox; its output, with a last line saying how it ended when it did
    not exit cleanly (a traceback, a limit). Errors of the code are output, not exceptions: the
    model reads them. Raises only for bad input or when the sandbox itself cannot start."""
    return _run_checked(code, limits)[0]


def _run_checked(code: str, limits: PythonLimits) -> tuple[str, bool]:
    """``(what run_python returns, whether the code failed)``: failed when it did not exit with
    status 0 (an exception, a limit, a kill)."""
    if not isinstance(code, str):
        raise ValueError(f"code must be a string, not {type(code).__name__}")
    if len(code) > MAX_CODE_CHARS:
        raise ValueError(f"code is {len(code)} characters long; the limit is {MAX_CODE_CHARS}")
    if "\x00" in code:
        raise ValueError("code contains a NUL character")
    cfg = {"cpu_s": max(1, int(limits.cpu_s)), "fsize_bytes": FILE_SIZE_BYTES,
           "memory_bytes": int(limits.memory_mb) * 2**20}
    flags = ["-I", "-u", "-X", "utf8"] + ([] if limits.site_packages else ["-S"])
    command = [sys.executable, *flags, "-c", _BOOTSTRAP]
    if limits.sandbox == "bubblewrap":
        cfg.update(namespace=False, patch_sockets=False, nproc=NPROC_IN_SANDBOX)
        env = {"HOME": "/tmp", "TMPDIR": "/tmp", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        spec = SandboxSpec(site_packages=limits.site_packages, scratch_bytes=int(limits.scratch_mb) * 2**20)
        with sandbox_uid() as uid:
            argv = sandbox_argv([*command, json.dumps(cfg), code], spec, env, uid)
            returncode, output, wall_killed = _run_child(argv, "/", {}, limits)
        if returncode is not None and returncode > 128:  # bwrap reports a child killed by a signal as 128 + it
            returncode = 128 - returncode
    else:
        namespace = network_isolation() == "namespace"
        cfg.update(namespace=namespace, patch_sockets=not namespace, nproc=NPROC_IN_NAMESPACE if namespace else 0)
        scratch = tempfile.mkdtemp(prefix="asyncrl-python-")
        env = {"HOME": scratch, "TMPDIR": scratch, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        try:
            returncode, output, wall_killed = _run_child([*command, json.dumps(cfg), code], scratch, env, limits)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    status = _status(returncode, limits, wall_killed)
    if not output and not status:
        return "(no output)", False
    text = output + (("\n" if output and not output.endswith("\n") else "") + status if status else "")
    return text, bool(status)


def _run_child(argv: list[str], cwd: str, env: dict[str, str], limits: PythonLimits) -> tuple[int, str, bool]:
    """Run ``argv`` in a session of its own, reading its output bounded, until it exits or the wall
    clock runs out; then kill its process group, whatever is left of it. ``(exit status, output,
    killed by the wall clock)``."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + limits.wall_s
        head, tail, dropped, wall_killed = _read_bounded(proc, deadline, 4 * limits.output_chars + 4)
        if not wall_killed:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:  # closed its output but runs on
                wall_killed = True
    finally:
        try:
            # the group: whatever it started goes too (in the sandbox, bwrap's death takes its
            # PID namespace, and every process in it, along)
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.wait()
        proc.stdout.close()
    return proc.returncode, _format_output(head, tail, dropped, limits.output_chars), wall_killed


# The docstring is what the model reads (the tool's schema): a paragraph of the description is one
# line, since the template shows its line breaks as written.
def python(code: str) -> str:
    """Run Python code in a fresh sandboxed interpreter and return what it prints (stdout and stderr).

    Each call starts from scratch: nothing is kept between calls, files included. Use print() to show results. The standard library is available; there is no network access, and time and memory are limited.

    Args:
        code: The Python source code to run, e.g. "print(sum(range(10)))".
    """
    return run_python(code, PythonLimits())


def python_tool(limits: PythonLimits) -> Tool:
    """The ``python`` tool under ``limits`` (same name and schema as :func:`python`). Its ToolBox
    time limit is the sandbox's wall-clock limit plus a margin, so that the sandbox's own, more
    informative kill report comes back rather than the ToolBox's bare timeout. A call whose code
    did not exit cleanly is a failed call (:class:`ToolError`): its output is still the observation.

    With the bubblewrap sandbox, the sandbox is started once here: one-line ValueError where it
    cannot start, naming the setting that opts in to running unsandboxed."""
    if limits.sandbox == "bubblewrap":
        try:
            check_sandbox(SandboxSpec(site_packages=limits.site_packages))
        except SandboxUnavailable as err:
            raise ValueError(f"python: the sandbox for model-written code cannot start here ({err}); "
                             "env.python_sandbox=none runs the code unsandboxed, as your user "
                             "(docs/security.md says what that does not stop)") from None

    def run(code: str) -> str:
        text, failed = _run_checked(code, limits)
        if failed:
            raise ToolError(text)
        return text

    # a closure over limits, not functools.partial: bind() would accept a 'limits' argument from
    # the model, which could then lift them
    run.__name__, run.__qualname__, run.__doc__ = python.__name__, python.__qualname__, python.__doc__
    return Tool(name="python", function=run, schema=Tool.from_function(python).schema,
                timeout_s=limits.wall_s + 5.0)
