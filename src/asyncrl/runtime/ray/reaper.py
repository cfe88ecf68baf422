"""The reaper of a private Ray cluster's processes (:func:`start_ray_reaper`), so that none outlives
the trainer. Ray ties its GCS server and raylet to the driver, but the raylet's agents, once it is
gone, wait up to a minute on the dead GCS before they exit. The reaper, a small process of its own,
notes which Ray processes descend from the trainer, and when the trainer dies (or the run stops its
cluster) kills those still alive, then removes the cluster's temp folder (their logs and sockets),
which only it knows to be unused. It also says when the cluster's raylet died and Ray's driver
ended the trainer before it could.

The standard library only, and no import of asyncrl: the reaper runs this file as a script
(``python -I``, where neither this folder nor asyncrl need be on the path), and the trainer imports
it before anything slow. It imports no Ray either: it knows Ray's processes by their titles and
files.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time

REAPER_POLL_S = 0.5  # how often the reaper notes the trainer's Ray processes
CHECKPOINT = re.compile(r"step-\d+")  # a complete checkpoint's folder (asyncrl.training.checkpoint)


def _leave_stop_signals_to_the_trainer() -> None:
    """Ctrl-C and a job's SIGTERM reach the whole process group: the trainer handles them (and
    checkpoints); the reaper must outlive it to do its work."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _stat(pid: int) -> tuple[int, int] | None:
    """(parent pid, start time in clock ticks) of a live process, else None."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] == b"Z" else (int(fields[1]), int(fields[19]))


def _processes() -> dict[int, tuple[int, int]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            table[int(entry)] = stat
    return table


def _descendants(roots: set[int], table: dict[int, tuple[int, int]]) -> set[int]:
    found, frontier = set(), set(roots)
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - found
        found |= frontier
    return found


def _is_ray(pid: int, ray_dir: str) -> bool:
    """A process of Ray's: its title is ``ray::...``, or it runs a file of the ray package."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            argv = cmdline.read().decode(errors="replace").split("\0")
    except OSError:
        return False
    return argv[0].startswith("ray::") or any(arg.startswith(ray_dir + os.sep) for arg in argv)


class _TrainerNews:
    """What the trainer tells the reaper through its pipe, a line each (:func:`tell_ray_reaper`):
    ``run <dir>`` (the run directory), ``stopping`` (the run stops the cluster itself),
    ``reported`` (the trainer wrote the line for its dead raylet)."""

    def __init__(self):
        self.pending, self.run_dir, self.stopping, self.reported = b"", None, False, False

    def add(self, data: bytes) -> None:
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            word, _, rest = line.decode(errors="replace").partition(" ")
            if word == "run":
                self.run_dir = rest
            self.stopping |= word == "stopping"
            self.reported |= word == "reported"


def _raylet_handle(pid: int, trainer_pid: int, table: dict[int, tuple[int, int]]) -> int | None:
    """A process handle (pidfd) of ``pid`` if it is the trainer's raylet, else None."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as comm:
            if comm.read().strip() != b"raylet" or table[pid][0] != trainer_pid:
                return None
        return os.pidfd_open(pid)
    except (OSError, AttributeError):  # gone already, or no pidfd (Linux before 5.3)
        return None


def reap_ray(trainer_pid: int, ray_dir: str, temp_dir: str | None = None) -> None:
    """Reaper loop: until stdin (a pipe the trainer holds open) ends, note the trainer's Ray
    descendants with their start times; then SIGKILL those still alive, and what they started
    meanwhile, and remove ``temp_dir``. A raylet that dies before the trainer ends it: Ray's
    driver then ends the trainer (exit 1) before it could say so, which the reaper says instead.
    Stop signals are the trainer's: the reaper must outlive it to do its work."""
    _leave_stop_signals_to_the_trainer()
    noted: dict[int, int] = {}  # pid -> start time (a reused pid has another)
    news, raylet, raylet_died = _TrainerNews(), None, False  # raylet: (pid, handle)
    while True:
        table = _processes()
        for pid in _descendants({trainer_pid}, table) - {os.getpid()}:  # its own argv names ray_dir
            if pid not in noted and _is_ray(pid, ray_dir):
                noted[pid] = table[pid][1]
                if raylet is None and (handle := _raylet_handle(pid, trainer_pid, table)) is not None:
                    raylet = (pid, handle)
        watched = [0] + ([raylet[1]] if raylet and not raylet_died else [])
        readable, _, _ = select.select(watched, [], [], REAPER_POLL_S)
        if 0 in readable:  # first: a trainer that died with its raylet is not a raylet that died first
            data = os.read(0, 4096)
            if not data:
                break
            news.add(data)
        elif readable:
            raylet_died = True
    if raylet_died and not news.stopping and not news.reported and _ray_ended(trainer_pid, temp_dir):
        with contextlib.suppress(OSError):
            os.write(2, raylet_death_line(raylet[0], "died", news.run_dir).encode())
    table = _processes()
    alive = {pid for pid, started in noted.items() if pid in table and table[pid][1] == started}
    for pid in (alive | _descendants(alive, table)) - {os.getpid()}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    if temp_dir:
        _remove_tree(temp_dir)


def _ray_ended(trainer_pid: int, temp_dir: str | None) -> bool:
    """Whether Ray's driver ended the trainer, by its log's last lines (Ray 2.60: ``The connection to
    the plasma store is failed. Terminate the process.``). A raylet also dies just before the
    trainer's end when the trainer was SIGKILLed (Ray kills it when the trainer's main thread
    ends): no fault of the raylet's, no line."""
    logs = glob.glob(os.path.join(temp_dir or "", "session_*", "logs", f"python-core-driver-*_{trainer_pid}.log"))
    for log in logs if temp_dir else []:
        with contextlib.suppress(OSError), open(log, "rb") as text:
            text.seek(max(0, os.path.getsize(log) - 8192))
            if b"Terminate the process" in text.read():
                return True
    return False


def raylet_death_line(pid: int, how: str, run_dir: str | None) -> str:
    """The line a run ends with when its private cluster's raylet dies (``how``: ``died``, ``was
    killed by SIGKILL``), naming the run's newest checkpoint: written by the trainer
    (:mod:`asyncrl.runtime.ray.local`), or by the reaper where Ray ended the trainer first."""
    where = ""
    if run_dir:
        try:
            steps = [name for name in os.listdir(os.path.join(run_dir, "checkpoints")) if CHECKPOINT.fullmatch(name)]
        except OSError:
            steps = []
        newest = max(steps, key=lambda name: int(name[5:]), default=None)
        where = (f"; continue from {newest} with: asyncrl train --resume {run_dir}" if newest else
                 f", and {run_dir} has no checkpoint to resume from yet")
    return f"asyncrl: the Ray cluster's raylet (pid {pid}) {how}; the run cannot go on without it{where}\n"


def _remove_tree(path: str, attempts: int = 20) -> None:
    """``rm -rf path``; again while a process killed a moment ago may still add a file to it."""
    for _ in range(attempts):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path):
            return
        time.sleep(0.1)


def start_ray_reaper(ray_dir: str, temp_dir: str | None = None) -> int | None:
    """Start :func:`reap_ray` for this process; returns the write end of its pipe, to close when
    the run stops its Ray cluster (the trainer's death closes it too). None where there is no
    ``/proc``. ``temp_dir``: the cluster's temp folder, removed once its processes are gone."""
    if not os.path.isdir("/proc"):
        return None
    read_end, write_end = os.pipe()  # not inherited by any other child: only this process holds the write end
    try:
        subprocess.Popen([sys.executable, "-I", os.path.abspath(__file__), "reap", str(os.getpid()), ray_dir,
                          *([temp_dir] if temp_dir else [])],
                         stdin=read_end, stdout=subprocess.DEVNULL, start_new_session=True)
    finally:
        os.close(read_end)
    return write_end


def tell_ray_reaper(write_end: int | None, news: str) -> None:
    """One line of news for the reaper (:class:`_TrainerNews`)."""
    if write_end is not None:
        with contextlib.suppress(OSError):
            os.write(write_end, f"{news}\n".encode())


def stop_ray_reaper(write_end: int | None) -> None:
    """Let the reaper kill what is left of the cluster now (after ``ray.shutdown``: stragglers)."""
    if write_end is not None:
        with contextlib.suppress(OSError):
            os.close(write_end)


if __name__ == "__main__" and sys.argv[1:2] == ["reap"]:
    reap_ray(int(sys.argv[2]), sys.argv[3], *sys.argv[4:5])
