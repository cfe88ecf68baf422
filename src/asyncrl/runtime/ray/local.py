"""What a run's private Ray cluster (``async.backend=ray``, no ``RAY_ADDRESS``) must not do to the
trainer, and how the run prevents it:

* **Its temp folder.** Ray keeps every session's logs, sockets and spill files under ``/tmp/ray``
  and never removes them. A private cluster gets a fresh folder of its own (:func:`new_temp_dir`),
  which the run removes when it stops the cluster, and the reaper
  (:func:`asyncrl.runtime.ray.reaper.start_ray_reaper`) when the trainer ends any other way.
* **Stop signals** (:func:`stop_signals_kept`). ``ray.init`` replaces the run's SIGTERM handler
  with its own (``sys.exit``), which would end a preempted run without its checkpoint. The
  handlers in place before it are put back after it. Ray's processes start with SIGTERM blocked
  (SIGINT Ray blocks itself), so that a SIGTERM to the whole process group (Slurm, torchrun)
  reaches only the trainer, which checkpoints and then stops them (:func:`shutdown`: with SIGKILL,
  as they would not heed Ray's SIGTERM).
* **A dead raylet** (:class:`RayletWatch`). Ray's driver then ends the trainer from C++ at its next
  object-store call (exit 1, no Python cleanup), and prints the raylet log's tail on stdout (a
  raylet agent publishes it to the driver). A thread that waits on the raylet's process handle
  sees the death first and ends the run with one line and exit 2; the driver prints nothing the
  cluster publishes once the raylet is gone; the reaper stops the rest of the cluster and removes
  its folder. Where Ray's driver is first (it was in the middle of an object-store call), the
  trainer exits 1 and the reaper writes the line.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

from asyncrl.runtime.ray.reaper import raylet_death_line

UNIX_SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX socket path (Linux), Ray's included
# what Ray adds under the folder for its longest socket path, and the folder's own name:
# "/asyncrl-ray-XXXXXXXX" + "/session_2026-11-27_12-10-20_078909_<pid>" + "/sockets/plasma_store"
RAY_PATH_TAIL = 21 + 43 + 21
TEMP_PREFIX = "asyncrl-ray-"
RAYLET_DIED_EXIT = 2  # a fault at run time (docs/errors.md)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_LIBC = ctypes.PyDLL(None)  # the C library, called with the GIL held
RAYLET_DEATH_GRACE_S = 1.0  # how long an error the cluster publishes waits to see whether the raylet is dying


def new_temp_dir() -> str:
    """A fresh folder for the cluster's sessions under the system temp folder, or under ``/tmp``
    where the system one is too long for Ray's socket paths."""
    root = tempfile.gettempdir()
    if len(os.fsencode(root)) + RAY_PATH_TAIL > UNIX_SOCKET_PATH_MAX:
        root = "/tmp"
    return tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=root)


@contextlib.contextmanager
def stop_signals_kept() -> Iterator[None]:
    """Around ``ray.init``: the SIGTERM and SIGINT handlers in place before it are in place after
    it, and the processes it starts inherit a blocked SIGTERM. Off the main thread (the Python
    API in a thread) Ray installs no handler and there is nothing to keep."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        for signum, handler in handlers.items():
            if handler is not None:  # None: set from C, not by Python; left as it is
                signal.signal(signum, handler)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGTERM that came meanwhile reaches the run's handler


def shutdown() -> None:
    """``ray.shutdown()`` of a private cluster: the driver disconnects, then the node's processes
    are SIGKILLed (the reaper ends those they started). Ray would send them a SIGTERM, blocked
    there (:func:`stop_signals_kept`), and wait a second for each. Where Ray's internals differ
    from 2.60's, plain ``ray.shutdown()``."""
    import ray

    worker = getattr(getattr(ray, "_private", None), "worker", None)
    node = getattr(worker, "_global_node", None)
    if node is None or not hasattr(node, "kill_all_processes"):
        ray.shutdown()
        return
    worker._global_node = None  # ray.shutdown() then leaves the node's processes to us
    try:
        ray.shutdown()
    finally:
        node.kill_all_processes(check_alive=False, allow_graceful=False)


def child_named(name: str) -> int | None:
    """The pid of a child of this process whose command name is ``name``, or None."""
    me = str(os.getpid()).encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                head, _, tail = stat.read().rpartition(b")")
        except OSError:
            continue
        fields = tail.split()
        if head.split(b"(", 1)[-1] == name.encode() and len(fields) > 1 and fields[1] == me:
            return int(entry)
    return None


def _ended(pid: int) -> bool:
    """Whether the child ``pid`` has ended (a zombie, or already reaped)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether the child ``pid`` has ended, or does within ``seconds``."""
    deadline = time.monotonic() + seconds
    while not _ended(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def _how_it_ended(pid: int) -> str:
    """``was killed by SIGKILL``, ``exited with status 1``, or ``died`` once its parent reaped it."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)  # leaves it to Ray to reap
    except OSError:
        info = None
    if info is None:
        return "died"
    if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
        return f"was killed by {signal.Signals(info.si_status).name}"
    return f"exited with status {info.si_status}"


class RayletWatch:
    """A daemon thread that waits for the raylet ``pid`` to end. Unless :meth:`stop` came first,
    it ends the trainer: stdout closed (the raylet agent's log dump goes there), one line on
    stderr naming the raylet and where to resume ``run_dir``, news of it to the reaper (whose pipe
    is ``reaper``: it says so itself where Ray ended the trainer first), exit
    :data:`RAYLET_DIED_EXIT`."""

    def __init__(self, pid: int, reaper: int | None):
        self.pid, self.reaper = pid, reaper
        self.run_dir: str | None = None  # set once the run's pool knows it
        self.stopping = threading.Event()
        self.handle = os.pidfd_open(pid)  # readable once the process has ended
        self.devnull = os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)  # stdout, once the raylet is dead
        self.unmuted = _mute_published_errors_after(pid, self.stopping)
        threading.Thread(target=self._wait, name="asyncrl-raylet-watch", daemon=True).start()

    @classmethod
    def of_child_raylet(cls, reaper: int | None) -> "RayletWatch | None":
        """The watch of this process's raylet; None without one or without process handles."""
        pid = child_named("raylet") if os.path.isdir("/proc") else None
        if pid is None or not hasattr(os, "pidfd_open"):
            return None
        try:
            return cls(pid, reaper)
        except OSError:  # a kernel before 5.3
            return None

    def _wait(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            select.select([self.handle], [], [])
        if self.stopping.is_set():
            os.close(self.handle)
            os.close(self.devnull)
            return
        # the main thread must not reach Ray again before the exit (its next object-store call ends
        # the process with status 1): it gets the GIL back only for moments now, and the libc
        # calls through _LIBC keep the GIL
        sys.setswitchinterval(1e-6)
        _LIBC.dup2(self.devnull, 1)
        line = raylet_death_line(self.pid, _how_it_ended(self.pid), self.run_dir).encode()
        _LIBC.write(2, line, len(line))
        if self.reaper is not None:
            _LIBC.write(self.reaper, b"reported\n", 9)
        os._exit(RAYLET_DIED_EXIT)

    def stop(self) -> None:
        """Before the run stops the cluster itself (its actors first): from here on the driver prints
        nothing the cluster publishes (a killed actor's "worker died" notice is no news then)."""
        self.stopping.set()


def _mute_published_errors_after(raylet: int, stopping: threading.Event):
    """From the raylet's death on, or once the run is ``stopping`` the cluster, the driver prints none
    of what the cluster publishes to it (Ray's driver prints it from threads of its own, which may run
    before the watch's, and flushes what it held back as repeats when it disconnects: every path ends
    in ``print_worker_logs``). Returns what undoes it. Where Ray's internals differ from 2.60's,
    nothing is muted."""
    import ray

    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_worker_logs", None)
    if original is None:
        return lambda: None

    def print_unless_raylet_ended(data, *args, **kwargs):
        # "raylet": the sender Ray gives these errors. A raylet agent may report the raylet's death
        # a moment before the raylet's last thread has exited: a moment's grace
        if stopping.is_set():
            return None
        if data.get("pid") == "raylet" and _ends_within(raylet, RAYLET_DEATH_GRACE_S):
            return None
        return original(data, *args, **kwargs)

    module.print_worker_logs = print_unless_raylet_ended

    def unmute() -> None:
        if module.print_worker_logs is print_unless_raylet_ended:
            module.print_worker_logs = original
    return unmute
