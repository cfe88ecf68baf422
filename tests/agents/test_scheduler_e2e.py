"""The episode scheduler end to end, as subprocesses: a 32-episode step has 16 or more environment
calls in flight at once in sync and async (local; Ray in the slow suite); an environment failing
one call in 20 trains on with its failures counted and its groups named in the ledger; one failing
every call stops the run in one line (on Ray too, slow); a group is handed to the trainer as soon
as it ends, the groups still playing stay in flight (what a checkpoint re-issues), on both backends
(Ray in the slow suite)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.runtime.pool import take_delivered
from asyncrl.runtime.worker import WorkUnit

from .test_agents_e2e import ENV, SMALL, rows

PLUGIN = '''
import json, os, threading, time
from asyncrl.agents import ENVIRONMENTS

ENVIRONMENTS["overlap"] = "overlap_env:Overlap"
ENVIRONMENTS["flaky"] = "overlap_env:Flaky"
ENVIRONMENTS["holds"] = "overlap_env:Holds"

_lock, _cond = threading.Lock(), threading.Condition()
_state = {"now": 0, "peak": 0, "calls": 0}


class Overlap:
    """Each step waits (up to 3 s) until 16 steps are in flight; the peak goes to peak_file."""

    def __init__(self, peak_file: str = "peak.json"):
        self.peak_file = peak_file

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        with _cond:
            _state["now"] += 1
            if _state["now"] > _state["peak"]:
                _state["peak"] = _state["now"]
                with open(self.peak_file, "w") as f:
                    json.dump({"peak": _state["peak"], "pid": os.getpid()}, f)
            _cond.notify_all()
            _cond.wait_for(lambda: _state["peak"] >= 16, timeout=3)
            _state["now"] -= 1
        return "again", 0.0, False, {}


class Flaky:
    """Every k-th step call of the process raises."""

    def __init__(self, k: int = 20):
        self.k = k

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        with _lock:
            _state["calls"] += 1
            fail = _state["calls"] % self.k == 0
        if fail:
            raise ConnectionError("container went away")
        return "again", 0.0, False, {}


class Holds:
    """Episodes that end at their first step, but the process's 1st and 5th (the first of each of
    the first two units: 2 groups of 2) hold that step until the run's metrics hold step 1; each
    writes what released it (``step 1``, or ``timeout`` after 240 s) to released-<k> in out_dir."""

    made = 0

    def __init__(self, metrics: str = "", out_dir: str = "."):
        with _lock:  # environments are made in the order their episodes were added
            self.k, Holds.made = Holds.made, Holds.made + 1
        self.metrics, self.out_dir = metrics, out_dir

    def reset(self, row):
        return row["prompt"]

    def step(self, action):
        if self.k in (0, 4):
            released = "timeout"
            for _ in range(2400):
                if os.path.exists(self.metrics) and '"step": 1,' in open(self.metrics).read():
                    released = "step 1"
                    break
                time.sleep(0.1)
            with open(os.path.join(self.out_dir, f"released-{self.k}"), "w") as f:
                f.write(released)
        return "done", 0.0, True, {}
'''
BASE = [*[a for a in SMALL if not a.startswith("rollout.")], "task=arithmetic", "run.plugins=[overlap_env]",
        "env.max_turns=2", "env.episode_tokens=120", "rollout.max_new_tokens=8", "trainer.steps=2"]


def train(tmp_path: Path, cache: str, name: str, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "overlap_env.py").write_text(PLUGIN)
    path = os.pathsep.join(p for p in (str(tmp_path), ENV.get("PYTHONPATH")) if p)  # the caller's asyncrl, if set
    return subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *BASE, *args, f"run.name={name}",
                           f"policy.cache_dir={cache}"], cwd=tmp_path, env={**ENV, "PYTHONPATH": path},
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("mode", ["sync", "async", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_32_episode_step_has_16_or_more_calls_in_flight(tmp_path, cache, mode):
    backend = ["run.mode=async", "async.backend=ray"] if mode == "ray" else [f"run.mode={mode}"]
    proc = train(tmp_path, cache, mode, *backend, "env.name=overlap", "rollout.prompts_per_step=8",
                 "rollout.samples_per_prompt=4", "env.kwargs={peak_file: " + str(tmp_path / "peak.json") + "}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((tmp_path / "peak.json").read_text())["peak"] >= 16
    records = [r for r in rows(tmp_path / "runs" / mode / "metrics.jsonl") if "episode/calls_in_flight_max" in r]
    assert records and max(r["episode/calls_in_flight_max"] for r in records) >= 16


@pytest.mark.parametrize("mode", [pytest.param("sync", marks=pytest.mark.slow), "async"])  # async's path holds sync's
def test_one_call_in_20_failing_trains_on_and_names_the_dropped_groups(tmp_path, cache, mode):
    proc = train(tmp_path, cache, mode, f"run.mode={mode}", "env.name=flaky", "env.retries=0",
                 "rollout.prompts_per_step=4", "rollout.samples_per_prompt=4", "trainer.steps=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [r for r in rows(tmp_path / "runs" / mode / "metrics.jsonl") if r["step"] > 0]
    assert sum(r.get("episode/failed", 0) for r in records) >= 1
    ledger = rows(tmp_path / "runs" / mode / "ledger.jsonl")
    dropped = [g for r in ledger for g in r["dropped"]]
    trained = [g for r in ledger for g in r["consumed"]]
    assert dropped and not set(dropped) & set(trained)
    assert sum(r.get("episode/failed_groups", 0) for r in records) == len(dropped)


@pytest.mark.parametrize("mode", ["sync", pytest.param("ray", marks=pytest.mark.slow)])
def test_an_environment_failing_every_call_stops_in_one_line(tmp_path, cache, mode):
    """On Ray the error is raised in an actor's episode thread and reaches the trainer as its class."""
    how = ["run.mode=async", "async.backend=ray"] if mode == "ray" else ["run.mode=sync"]
    proc = train(tmp_path, cache, "down", *how, "env.name=flaky", "env.kwargs={k: 1}",
                 "env.retries=1", "env.retry_backoff_s=0")
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert "Traceback" not in proc.stderr
    assert "environment overlap_env.Flaky on row uid=" in lines[-1]
    assert "episodes failed, more than env.max_failure_frac=0.25" in lines[-1]
    assert lines[-1].endswith("step raised ConnectionError: container went away (try 2 of 2)")


def test_a_units_groups_delivered_one_by_one_leave_the_rest_in_flight():
    """What a worker that sends each group as it ends leaves in flight (both backends' pools keep
    it so): the groups not yet sent, which a checkpoint re-issues (the whole unit would train the
    sent ones twice)."""
    units = {5: WorkUnit(5, problem_indices=[10, 11, 12], group_ids=[40, 41, 42], n=4)}
    assert take_delivered(units, {"unit_id": 5, "delivered": [41]})
    assert units == {5: WorkUnit(5, problem_indices=[10, 12], group_ids=[40, 42], n=4)}
    assert take_delivered(units, {"unit_id": 5, "delivered": [40, 42]}) and units == {}
    assert not take_delivered(units, {"unit_id": 5, "delivered": [40]})  # no longer in flight: dropped
    units = {6: WorkUnit(6, [1], [7], 2), 8: WorkUnit(8, [2], [9], 2)}
    assert take_delivered(units, {"unit_id": 6}) and list(units) == [8]  # a whole unit's result


@pytest.mark.parametrize("mode", ["async", pytest.param("ray", marks=pytest.mark.slow)])
def test_a_group_reaches_the_trainer_while_its_units_slowest_episode_plays(tmp_path, cache, mode):
    """Two units of two groups are admitted (K = 1, a step of 2 groups); one episode of each holds
    its step until the run's metrics hold step 1. Step 1 can only be made of the other group of
    each unit, sent as it ended: a backend that returned whole units would never write step 1."""
    backend = ["async.backend=ray"] if mode == "ray" else []
    run_dir = tmp_path / "runs" / mode
    proc = train(tmp_path, cache, mode, "run.mode=async", *backend, "env.name=holds", "async.max_staleness=1",
                 "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "env.step_timeout_s=300",
                 "eval.n_problems=0",  # no evaluation: its environments would count (and hold) in the trainer
                 "env.kwargs={metrics: " + str(run_dir / "metrics.jsonl") + ", out_dir: " + str(tmp_path) + "}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [(tmp_path / f"released-{k}").read_text() for k in (0, 4)] == ["step 1", "step 1"]
    first = rows(run_dir / "ledger.jsonl")[0]
    assert first["step"] == 1 and sorted(first["consumed"]) == [1, 3]  # the groups that ended while 0 and 2 played


def _fast_or_slow_worker(tok, released):
    """A stand-in RolloutWorker whose problem ``slow`` waits in its step until ``released`` is set."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner
    from asyncrl.agents.render import PlainTurns
    from asyncrl.rollout.rollouts import RolloutOut
    from asyncrl.tasks import Problem

    from .test_scheduler import ReplyEngine

    class FastOrSlow:
        def reset(self, row):
            self.slow = row["uid"] == "slow"
            return row["prompt"]

        def step(self, action):
            if self.slow:
                released.wait(10)
            return "", 0.0, True, {}

    class Rollout:
        def __init__(self):
            self.runner = EpisodeRunner(FastOrSlow, PlainTurns(tok), tok, EpisodeLimits(2, 8, 100))

        def play(self, engine, between):
            from asyncrl.agents.play import Play
            return Play(self.runner, engine, between)

        def finish(self, episodes, n, first_group_id, scheduler):
            batch = type("B", (), {"group_ids": torch.zeros(len(episodes), dtype=torch.long)})()
            return RolloutOut(batch, [], None, failed_groups=[])

    class Worker:
        spec = type("S", (), {"interruptible": False, "worker_id": 0})()
        on_progress = None
        channel = type("C", (), {"latest": lambda self: 0})()
        engine = ReplyEngine(tok)
        problems = [Problem(uid=u, prompt="What is 1 + 1?", answer="2", solution="") for u in ("fast", "slow")]
        rollout = Rollout()
        pull_s = 0.0

    return Worker()


def test_an_async_worker_sends_a_group_before_its_units_slowest_episode_ends(tiny_policy):
    """The worker's loop (asyncrl.runtime.episode_stream): the fast group's payload comes while the
    slow group's environment is still waiting; the slow one's comes after it answers."""
    import threading

    from asyncrl.runtime.episode_stream import EpisodeStream

    _, tok, _ = tiny_policy
    released = threading.Event()
    stream = EpisodeStream(_fast_or_slow_worker(tok, released))
    stream.add(WorkUnit(3, problem_indices=[0, 1], group_ids=[20, 21], n=2))
    sent = []
    while not sent:
        sent += stream.advance(0.05)
    assert [p["delivered"] for p in sent] == [[20]] and stream.live == 2  # the slow group still plays
    released.set()
    while stream.live:
        sent += stream.advance(0.05)
    assert [p["delivered"] for p in sent] == [[20], [21]] and not stream.units


def test_an_episode_thread_hands_each_group_over_as_it_ends(tiny_policy, monkeypatch):
    """A Ray actor's episode loop (asyncrl.runtime.worker.EpisodeThread), without Ray: a take
    answers with the fast group while the slow one plays, then with the slow one; the loop stops."""
    import threading

    from asyncrl.runtime import worker as worker_module

    # the stand-in rollout's batch is no Batch: no numpy round trip for it
    monkeypatch.setattr(worker_module, "batch_to_numpy", lambda batch: batch)
    monkeypatch.setattr(worker_module, "batch_from_numpy", lambda arrays: arrays)
    _, tok, _ = tiny_policy
    released = threading.Event()
    episodes = worker_module.EpisodeThread(_fast_or_slow_worker(tok, released))
    assert episodes.take(0.05) == []  # nothing added yet: an empty answer after the wait
    episodes.add(WorkUnit(3, problem_indices=[0, 1], group_ids=[20, 21], n=2))
    sent = []
    while not sent:
        sent += episodes.take(5)
    assert [p["delivered"] for p in sent] == [[20]]
    released.set()
    while len(sent) < 2:
        sent += episodes.take(5)
    assert [p["delivered"] for p in sent] == [[20], [21]] and [p["unit_id"] for p in sent] == [3, 3]
    episodes.stop(5)
    assert not episodes.thread.is_alive() and episodes.failure is None


def test_an_episode_threads_error_is_raised_by_take_as_its_class():
    """A ConfigError in the loop (an environment past its failure policy) is raised by the next
    take, once the payloads sent before it are taken (the Ray actor passes it on to the trainer)."""
    from asyncrl.core.loader import ConfigError
    from asyncrl.runtime.worker import EpisodeThread

    class Broken:
        spec = type("S", (), {"interruptible": False, "worker_id": 0})()
        engine = None

        class rollout:
            @staticmethod
            def play(engine, hook):
                raise ConfigError("env.max_failure_frac", "26 of the last 26 episodes failed")

    episodes = EpisodeThread(Broken())
    episodes.thread.join(5)
    with pytest.raises(ConfigError, match="^config error: env.max_failure_frac: 26 of the last 26"):
        episodes.take(5)
    with pytest.raises(ConfigError):  # and again: the run stops on it, whoever asks
        episodes.take(5)


HANGS = '''
import os, time
from asyncrl.agents import ENVIRONMENTS
from asyncrl.envs.guess import GuessNumber

ENVIRONMENTS["hangs"] = "hang_env:Hangs"


class Hangs(GuessNumber):
    """The guess game, whose steps hang (ten minutes) once the run of $HANG_RUN_DIR finished step 1,
    while the file HANG exists; the first to hang writes HUNG."""

    def step(self, action):
        metrics = os.path.join(os.environ.get("HANG_RUN_DIR", "-"), "metrics.jsonl")
        if os.path.exists("HANG") and os.path.exists(metrics) and '"step": 1,' in open(metrics).read():
            open("HUNG", "w").close()
            time.sleep(600)
        return super().step(action)
'''


@pytest.mark.slow  # a signal to a process group; resume on episodes stays in test_agents_e2e: make test-all
def test_sigterm_while_sync_episodes_wait_on_a_hung_environment_stops_and_resumes_exactly(tmp_path, cache):
    """The stop does not wait for the environment (a 600 s step, env.step_timeout_s=600: the test's
    own 300 s limit would end first), and the abandoned batch is generated again on resume: the
    weights equal an uninterrupted run's (rounds: lock-step, reproducible)."""
    import signal
    import time

    from .test_agents_e2e import GUESS, weights

    (tmp_path / "hang_env.py").write_text(HANGS)
    run_dir = tmp_path / "runs" / "stopped"
    env = {**ENV, "PYTHONPATH": str(tmp_path), "HANG_RUN_DIR": str(run_dir)}
    args = [*GUESS, "run.mode=sync", "trainer.steps=3", "env.schedule=rounds", "run.plugins=[hang_env]",
            "env.name=hangs", "env.step_timeout_s=600", f"policy.cache_dir={cache}"]
    whole = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *args, "run.name=whole"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=400)
    assert whole.returncode == 0, whole.stderr[-3000:]
    (tmp_path / "HANG").touch()
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "train", *args, "run.name=stopped"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "HUNG").exists():  # step 2's episodes wait on a hung step
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        assert time.monotonic() < deadline, "run too slow"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "stopped by SIGTERM after step 1" in err and "--resume" in err
    (tmp_path / "HANG").unlink()
    resumed = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "--resume", str(run_dir)], cwd=tmp_path,
                             env=env, capture_output=True, text=True, timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    a, b = weights(tmp_path / "runs" / "whole"), weights(run_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)
