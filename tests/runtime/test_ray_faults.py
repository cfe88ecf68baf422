"""Faults of a run on its private Ray cluster (``async.backend=ray``, no ``RAY_ADDRESS``), held to
the local backend's rules (docs/errors.md, "Faults at run time", "The Ray backend"): SIGTERM keeps
the run's handler (one checkpoint, one line, exit 143), a dead raylet is one line and exit 2
without Ray's log dump, no process outlives the run and the cluster's temp folder goes with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux process table and pidfd")

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_faults import assert_nothing_half_written  # noqa: E402
from test_ray_loopback import ARGS, GONE_WITHIN_S, _left_after  # noqa: E402

from asyncrl.runtime.ray import cluster, local as ray_local  # noqa: E402

STOPPED_WITHIN_S = 60  # from the signal to the trainer's exit, its checkpoint written
# a reward that always separates a group's samples: no "no learning signal" warning on stderr
SPREAD = "import random\n\ndef spread(completions, **kwargs):\n    return [random.random() for _ in completions]\n"


@pytest.fixture()
def short_tmpdir():
    """The run's TMPDIR: short (Ray's socket paths must fit 107 bytes), and this test's alone, so
    that whatever Ray leaves in a temp folder (its default: ``$TMPDIR/ray``) is found there."""
    path = Path(tempfile.mkdtemp(prefix="rf", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _start(tmp_path: Path, model_dir: Path, tmpdir: Path) -> subprocess.Popen:
    """A long run in a process group of its own, as a shell or Slurm starts it."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    (tmp_path / "spread.py").write_text(SPREAD)
    return subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *ARGS, "trainer.steps=200",
                             f"reward.funcs=[{tmp_path / 'spread.py'}:spread]",
                             "run.checkpoint_every=0", f"policy.model_path={model_dir}", "run.name=fault",
                             f"run.out_dir={tmp_path / 'out'}"],
                            cwd=tmp_path, env={**env, "HF_HUB_OFFLINE": "1", "TMPDIR": str(tmpdir)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _steps_done(metrics: Path) -> int:
    text = metrics.read_text() if metrics.exists() else ""
    return sum(json.loads(line)["step"] > 0 for line in text[:text.rfind("\n") + 1].splitlines())


def _note(root, seen: dict) -> None:
    """Add the processes under ``root`` to ``seen`` (pid -> (start time, command line)); the
    command line as last read (a child seen between fork and exec has its parent's)."""
    for member in root.children(recursive=True):
        try:
            seen[member.pid] = (member.create_time(), " ".join(member.cmdline())[:100] or seen[member.pid][1])
        except (psutil.Error, KeyError):
            continue


def _run_until_step(proc: subprocess.Popen, metrics: Path, step: int) -> dict:
    """Wait for ``step`` finished steps; the run's processes seen meanwhile, pid -> (start, command)."""
    seen, root = {}, psutil.Process(proc.pid)
    deadline = time.monotonic() + 300
    while _steps_done(metrics) < step:
        assert proc.poll() is None, f"run ended early: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "run too slow"
        _note(root, seen)
        time.sleep(0.1)
    _note(root, seen)
    seen.pop(proc.pid, None)
    assert any("raylet" in command for _, command in seen.values()), f"no raylet among {seen}"
    return seen


def _ray_files(tmpdir: Path) -> list[str]:
    """The cluster's folder, Ray's default one (``ray``) and any ``session_*`` folder in ``tmpdir``."""
    return [p.name for p in tmpdir.rglob("*") if p.name.startswith((ray_local.TEMP_PREFIX, "session_", "ray"))]


def _assert_left_nothing(seen: dict, tmpdir: Path) -> None:
    """No process of the run alive, and no file of Ray's in its temp folder."""
    assert _left_after(seen, GONE_WITHIN_S) == []
    deadline = time.monotonic() + GONE_WITHIN_S  # the reaper removes what the trainer could not
    while _ray_files(tmpdir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _ray_files(tmpdir) == []


@pytest.mark.slow  # a Ray cluster's fault path: make test-all
def test_sigterm_of_a_ray_run_checkpoints_once_and_leaves_nothing(tmp_path, model_dir, short_tmpdir):
    proc = _start(tmp_path, model_dir, short_tmpdir)
    run_dir = tmp_path / "out" / "fault"
    seen = _run_until_step(proc, run_dir / "metrics.jsonl", 2)
    os.killpg(proc.pid, signal.SIGTERM)  # the whole group, Ray's processes too, as Slurm sends it
    out, err = proc.communicate(timeout=STOPPED_WITHIN_S)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "stopped by SIGTERM after step" in lines[0] and "--resume" in lines[0], err[-3000:]
    done = _steps_done(run_dir / "metrics.jsonl")
    assert [p.name for p in (run_dir / "checkpoints").iterdir()] == [f"step-{done:06d}"]
    assert f"after step {done} " in lines[0]
    assert_nothing_half_written(tmp_path / "out", finished=False)
    _assert_left_nothing(seen, short_tmpdir)


@pytest.mark.slow  # a Ray cluster's fault path: make test-all
def test_a_killed_raylet_is_one_line_and_exit_2(tmp_path, model_dir, short_tmpdir):
    proc = _start(tmp_path, model_dir, short_tmpdir)
    seen = _run_until_step(proc, tmp_path / "out" / "fault" / "metrics.jsonl", 2)
    raylet = next(p.pid for p in psutil.Process(proc.pid).children(recursive=True) if p.name() == "raylet")
    os.kill(raylet, signal.SIGKILL)
    out, err = proc.communicate(timeout=STOPPED_WITHIN_S)
    # 2 from the trainer's watch; 1 where Ray's driver ended the trainer first, the line the reaper's
    how = {ray_local.RAYLET_DIED_EXIT: "was killed by SIGKILL", 1: "died"}.get(proc.returncode)
    assert how, (proc.returncode, out[-3000:], err[-3000:])
    assert "Raylet is terminated" not in out and "[state-dump]" not in out, out[-3000:]  # Ray's log dump
    assert err.strip().splitlines() == [
        f"asyncrl: the Ray cluster's raylet (pid {raylet}) {how}; the run cannot go on without it, "
        f"and {tmp_path / 'out' / 'fault'} has no checkpoint to resume from yet"]
    _assert_left_nothing(seen, short_tmpdir)


def _actor_pid(proc: subprocess.Popen) -> int | None:
    """The rollout actor's process (Ray names it ``ray::RolloutActor...``), or None."""
    for member in psutil.Process(proc.pid).children(recursive=True):
        try:
            if (member.cmdline() or [""])[0].startswith("ray::RolloutActor"):
                return member.pid
        except psutil.Error:
            continue
    return None


@pytest.mark.slow
def test_a_ray_worker_killed_mid_run_leaves_nothing_on_stdout(tmp_path, model_dir, short_tmpdir):
    """A rollout actor SIGKILLed mid-run (the run restarts it and trains on), then SIGTERM: Ray's
    "worker died" notice, which its driver prints for the cluster, is no output of the run's."""
    proc = _start(tmp_path, model_dir, short_tmpdir)
    metrics = tmp_path / "out" / "fault" / "metrics.jsonl"
    seen = _run_until_step(proc, metrics, 2)
    os.kill(_actor_pid(proc), signal.SIGKILL)
    done, deadline = _steps_done(metrics), time.monotonic() + 240
    while _steps_done(metrics) < done + 2:  # restarted, and trained on
        assert proc.poll() is None, f"run ended early: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "no step after the restart"
        time.sleep(0.2)
    time.sleep(2)  # the notice reaches the driver within moments of the death
    _note(psutil.Process(proc.pid), seen)
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=STOPPED_WITHIN_S)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "rollout worker 0 died (Ray: " in err and "stopped by SIGTERM after step" in err, err[-3000:]
    assert out == "", out[-3000:]
    _assert_left_nothing({pid: v for pid, v in seen.items() if pid != proc.pid}, short_tmpdir)


WATCHED = """
import os, signal, subprocess, sys, time
from asyncrl.runtime.ray.local import RayletWatch
raylet = subprocess.Popen(["sleep", "60"])
watch = RayletWatch(raylet.pid, None)
watch.run_dir = sys.argv[1]
print("raylet", raylet.pid, flush=True)
if sys.argv[2] == "stop":
    watch.stop()
os.kill(raylet.pid, signal.SIGKILL)
time.sleep(2)
print("Raylet is terminated. Termination is unexpected. Last 20 lines of the Raylet logs: ...", flush=True)
"""


def test_the_raylet_watch_ends_the_process_with_one_line(tmp_path):
    """What the watch does when the raylet dies (a ``sleep`` stands in for it): stdout closed
    (Ray's log dump goes there), one line, exit 2; nothing when the run stops the cluster itself."""
    (tmp_path / "checkpoints" / "step-000004").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000005.tmp").mkdir()  # half-written: not one to resume from
    died, stopped = [subprocess.Popen([sys.executable, "-c", WATCHED, str(tmp_path), how], stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True) for how in ("die", "stop")]
    (out, err), (stopped_out, stopped_err) = died.communicate(timeout=120), stopped.communicate(timeout=120)
    assert died.returncode == ray_local.RAYLET_DIED_EXIT, err
    assert out.startswith("raylet ") and out.count("\n") == 1, out  # nothing after the raylet died
    assert err.splitlines() == [
        f"asyncrl: the Ray cluster's raylet (pid {out.split()[1]}) was killed by SIGKILL; the run cannot go on "
        f"without it; continue from step-000004 with: asyncrl train --resume {tmp_path}"]
    assert stopped.returncode == 0 and stopped_err == "", stopped_err
    assert "Raylet is terminated" in stopped_out


TRAINER = """
import os, signal, subprocess, sys, time
from asyncrl.runtime.ray.reaper import start_ray_reaper, tell_ray_reaper
ray_dir, run_dir, temp_dir, how = sys.argv[1:5]
logs = os.path.join(temp_dir, "session_1", "logs")
os.makedirs(logs)
reaper = start_ray_reaper(ray_dir, temp_dir)
raylet = subprocess.Popen([os.path.join(ray_dir, "raylet"), "60"])
tell_ray_reaper(reaper, f"run {run_dir}")
if how == "stopping":
    tell_ray_reaper(reaper, "stopping")
time.sleep(1.5)  # the reaper notes its processes twice a second
os.kill(raylet.pid, signal.SIGKILL)
time.sleep(0.5)
if how == "reported":
    tell_ray_reaper(reaper, "reported")
if how != "sigkilled":  # as Ray's driver ends the trainer when it finds the raylet gone
    with open(os.path.join(logs, f"python-core-driver-01000000ff_{os.getpid()}.log"), "w") as log:
        log.write("connection.cc:216: The connection to the plasma store is failed. Terminate the process.\\n")
print(raylet.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL) if how == "sigkilled" else os._exit(1)
"""


def test_the_reaper_names_a_dead_raylet_when_ray_ended_the_trainer_first(tmp_path):
    """The reaper's line where Ray ended the trainer before it could write its own; none where the
    trainer did, where the run was stopping the cluster itself, or where the trainer was SIGKILLed
    (Ray then kills the raylet first). A ``sleep`` stands in for the raylet."""
    ray_dir = tmp_path / "ray"
    ray_dir.mkdir()
    (ray_dir / "raylet").symlink_to(shutil.which("sleep"))  # its command name: raylet
    (tmp_path / "checkpoints" / "step-000012").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-000009").mkdir()
    cases = ("unreported", "reported", "stopping", "sigkilled")
    runs = {how: subprocess.Popen([sys.executable, "-c", TRAINER, str(ray_dir), str(tmp_path), str(tmp_path / how),
                                   how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for how in cases}
    ended = {how: proc.communicate(timeout=120) for how, proc in runs.items()}
    out, err = ended["unreported"]
    assert err.splitlines() == [
        f"asyncrl: the Ray cluster's raylet (pid {out.strip()}) died; the run cannot go on without it; "
        f"continue from step-000012 with: asyncrl train --resume {tmp_path}"], err
    assert [ended[how][1] for how in cases[1:]] == ["", "", ""]
    assert not any((tmp_path / how).exists() for how in cases)  # the reaper removed each temp folder


def test_ray_init_keeps_the_runs_stop_signals_and_blocks_sigterm_in_what_it_starts():
    """``stop_signals_kept`` around a stand-in for ``ray.init``: it replaces the SIGTERM handler
    (as Ray's does) and starts a process (as Ray starts its GCS server and raylet)."""
    def ours(signum, frame):
        pass

    before = signal.signal(signal.SIGTERM, ours)
    try:
        with ray_local.stop_signals_kept():
            signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
            child = subprocess.run(["grep", "^SigBlk", "/proc/self/status"], capture_output=True, text=True)
        assert signal.getsignal(signal.SIGTERM) is ours
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.signal(signal.SIGTERM, before)
    assert int(child.stdout.split()[1], 16) & (1 << (signal.SIGTERM - 1))


def test_the_private_cluster_gets_a_short_temp_folder_of_its_own(monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", lambda **kwargs: calls.append(kwargs))
    monkeypatch.setattr(cluster, "start_ray_reaper", lambda ray_dir, temp_dir: calls.append(temp_dir))
    monkeypatch.setattr(cluster, "_temp_dir", None)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path / ("long" * 20)))  # too long for Ray's socket paths
    (tmp_path / ("long" * 20)).mkdir()
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() reads TMPDIR again
    assert cluster.init_ray(1)
    reaped, kwargs = calls
    folder = kwargs["_temp_dir"]
    try:
        assert reaped == folder and Path(folder).parent == Path("/tmp") and Path(folder).is_dir()
        assert len(folder + "/session_2026-11-27_12-10-20_078909_4194304/sockets/plasma_store") <= 107
        assert kwargs["logging_level"] >= 40  # ERROR: no start-up notices on the run's stderr
    finally:
        monkeypatch.setattr(cluster, "shutdown", lambda: None)
        cluster.stop_private()
    assert not Path(folder).exists()


def test_what_rays_driver_prints_for_the_cluster_goes_to_stderr(monkeypatch, capsys):
    """Ray's driver prints the notices the cluster publishes (a dead worker's, from the raylet) on
    stdout, and so the actors' stdout and what it flushes at disconnect: after ``init_ray`` each
    lands on stderr (a joined cluster here; a private one gets the same)."""
    from ray._private import worker

    monkeypatch.setattr(worker, "print_worker_logs", worker.print_worker_logs)  # put back after the test
    monkeypatch.setattr(cluster.ray, "is_initialized", lambda: False)
    monkeypatch.setattr(cluster.ray, "init", lambda **kwargs: None)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    monkeypatch.setenv("RAY_COLOR_PREFIX", "0")
    assert cluster.init_ray(1)
    cluster.init_ray(1)  # a second run in the process: printed once all the same
    notice = "A worker died or was killed while executing a task by an unexpected system error. (test 1)"
    worker.print_to_stdstream({"lines": [notice], "pid": "raylet", "is_err": False}, ignore_prefix=False)
    worker.print_to_stdstream({"lines": ["an actor's print (test 2)"], "pid": 4321, "ip": "127.0.0.1",
                               "localhost": "127.0.0.1", "is_err": False, "actor_name": "RolloutActor"},
                              ignore_prefix=False)
    worker.print_worker_logs({"lines": ["flushed at disconnect (test 3)"], "pid": "raylet"}, sys.stdout)
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"(raylet) {notice}", "(RolloutActor pid=4321) an actor's print (test 2)",
                                "(raylet) flushed at disconnect (test 3)"]


def test_once_the_run_stops_its_cluster_the_driver_prints_nothing_of_it(monkeypatch, capsys):
    """After the watch's ``stop`` (the run stops its cluster), nothing the cluster published is
    printed, on any path: the notice thread's, and the repeats Ray held back and flushes when the
    driver disconnects. A ``sleep`` stands in for the raylet."""
    from ray._private import worker

    original = worker.print_worker_logs
    monkeypatch.setattr(worker, "print_worker_logs", original)  # put back after the test
    monkeypatch.setenv("RAY_COLOR_PREFIX", "0")
    raylet = subprocess.Popen(["sleep", "60"])
    watch = ray_local.RayletWatch(raylet.pid, None)
    try:
        worker.print_worker_logs({"lines": ["an actor's line while the run trains"], "pid": 4321}, sys.stderr)
        watch.stop()
        worker.print_to_stdstream({"lines": ["A worker died (published while stopping)"], "pid": "raylet",
                                   "is_err": False}, ignore_prefix=False)
        worker.print_worker_logs({"lines": ["A worker died (a repeat flushed at disconnect)"], "pid": "raylet"},
                                 sys.stdout)
    finally:
        watch.stop()  # before the stand-in ends: the watch would end this process
        raylet.kill()
        raylet.wait()
    watch.unmuted()
    assert worker.print_worker_logs is original
    assert capsys.readouterr() == ("", "(pid=4321) an actor's line while the run trains\n")
