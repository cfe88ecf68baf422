"""The harness runner gives freed heap pages back every TRIM_EVERY ended episodes (core.heap)."""

import platform
from types import SimpleNamespace

import pytest

from asyncrl.agents import harness_runner
from asyncrl.core.heap import trim_free_heap


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_trim_runs_on_glibc():
    assert trim_free_heap() is True


def test_the_runner_trims_once_per_trim_every_ended_episodes(monkeypatch):
    trims = []
    monkeypatch.setattr(harness_runner, "trim_free_heap", lambda: trims.append(1))
    runner = harness_runner.HarnessRunner.__new__(harness_runner.HarnessRunner)  # only ended()'s state
    runner.lock, runner.sessions, runner.ended_count = harness_runner.threading.Lock(), {}, 0
    closed = []
    for i in range(2 * harness_runner.TRIM_EVERY + 1):
        env = SimpleNamespace(key=f"k{i}", close=closed.append)
        runner.sessions[env.key] = env
        runner.ended(SimpleNamespace(env=env, end="done"))
    assert len(trims) == 2 and not runner.sessions and len(closed) == 2 * harness_runner.TRIM_EVERY + 1
