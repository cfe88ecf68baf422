"""A lost trainer rank on NCCL as on gloo (docs/scaling.md, "Faults"): the trainer's process group is
built so that a failed or timed-out NCCL collective raises in Python (our one line) rather than
aborting the process; rank 0 never starts a collective after a stop signal without a roll call of the
other ranks, so a SIGTERM after a lost rank skips the checkpoint in one line instead of hanging;
``asyncrl train --nproc-per-node`` names the rank it lost and where the run continues when no rank
could say it. NCCL is checked with fakes (these machines have no GPU); the rest runs torchrun's store."""

from __future__ import annotations

import os
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
import torch

from asyncrl.distributed import liveness, world as world_mod
from asyncrl.distributed.launch import SAID_ENV
from asyncrl.distributed.liveness import Peers
from asyncrl.distributed.world import RankLost, World
from asyncrl.runtime.checkpointing import resume_hint

NCCL_KEYS = ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_NCCL_BLOCKING_WAIT")


def _unset(monkeypatch, *names: str) -> None:
    """``names`` absent for the test and restored after it (monkeypatch.delenv of an absent name
    would not undo what the code under test sets)."""
    for name in names:
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)


def test_the_trainers_nccl_group_raises_rather_than_aborting(monkeypatch):
    """init_world on CUDA: clean-up-only async error handling and no flight-recorder dump are in the
    environment when ProcessGroupNCCL is built (it reads them then), blocking waits are left off
    (they would serialise FSDP's prefetch), and the group's timeout is trainer.fsdp.timeout_s."""
    _unset(monkeypatch, *NCCL_KEYS, "ASYNCRL_NCCL_SAVED")
    built = []

    def init_process_group(backend, timeout):
        built.append((backend, timeout, {k: os.environ.get(k) for k in NCCL_KEYS}))

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", init_process_group)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: None)
    monkeypatch.setattr(world_mod, "die_with_agent", lambda: None)
    monkeypatch.setattr(world_mod, "bind_collectives", lambda: None)
    world_mod.init_world(World(rank=1, size=2, local_rank=1), "cuda", 42.0)
    assert built == [("nccl", timedelta(seconds=42), {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
                                                     "TORCH_NCCL_DUMP_ON_TIMEOUT": "0",
                                                     "TORCH_NCCL_BLOCKING_WAIT": None})]


def test_the_gloo_group_leaves_the_nccl_settings_alone(monkeypatch):
    _unset(monkeypatch, *NCCL_KEYS)
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.distributed, "init_process_group", lambda backend, timeout: None)
    monkeypatch.setattr(world_mod, "die_with_agent", lambda: None)
    monkeypatch.setattr(world_mod, "bind_collectives", lambda: None)
    world_mod.init_world(World(rank=1, size=2), "cpu", 42.0)
    assert not any(name in os.environ for name in NCCL_KEYS)


@pytest.fixture
def job(monkeypatch):
    """torchrun's store (the test's own), and a Peers per rank made with ``peers(rank)``; rank 0's
    stop-signal bound is 1 s here (6 s in a job)."""
    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    monkeypatch.setattr(liveness, "SIGNALLED_S", 1.0)
    made = []

    def peers(rank: int) -> Peers:
        made.append(Peers(World(rank=rank, size=2), timeout_s=30, token="t"))
        return made[-1]

    yield peers
    for each in made:
        each.close()


def _checkpointed(run_dir: Path, *steps: int) -> Path:
    for step in steps:
        (run_dir / "checkpoints" / f"step-{step:06d}").mkdir(parents=True)
    return run_dir


def test_after_a_stop_signal_rank_0_calls_the_roll_before_a_collective(job, tmp_path):
    """Rank 1 is gone (no heartbeat, no answer): rank 0, signalled, raises RankLost naming it and the
    checkpoint to continue from, within the stop bound, instead of broadcasting into a hang."""
    leader = job(0)
    leader.signalled = True
    started = time.monotonic()
    with pytest.raises(RankLost) as caught:
        leader.announce()
    assert time.monotonic() - started < 5
    assert str(caught.value) == ("trainer rank 0: trainer rank 1 does not answer (no heartbeat for 1 s: killed or "
                                 "stopped); no checkpoint of this stop, which needs every rank")
    assert not leader.store.check(["command/0"])  # rank 1 would never have been asked for anything
    leader.note_run(resume_hint(_checkpointed(tmp_path / "run", 2, 4)))
    with pytest.raises(RankLost, match=f"every rank; continue with: asyncrl train --resume {tmp_path / 'run'} "
                                       r"\(its checkpoint of step 4\)$"):
        leader.roll_call()


def test_a_live_rank_answers_the_roll_at_once(job):
    leader, follower = job(0), job(1)
    waiting = threading.Thread(target=follower.await_command)
    waiting.start()
    leader.signalled = True
    started = time.monotonic()
    leader.announce()
    waiting.join(timeout=5)
    assert not waiting.is_alive() and time.monotonic() - started < 1.0  # its answer, not its next heartbeat


def test_a_stop_after_a_lost_rank_writes_no_checkpoint(tmp_path):
    """loop._stop: the roll call fails, so neither the checkpoint (every rank writes its shard) nor
    the "done" command is sent; the run's files are closed."""
    from asyncrl.runtime import loop

    calls = []

    class Gone:
        def roll_call(self):
            raise RankLost("trainer rank 0: trainer rank 1 does not answer")

    class Record:
        def __init__(self, name):
            self.name = name

        def __getattr__(self, what):
            return lambda *a, **k: calls.append(f"{self.name}.{what}")

    class Cfg:
        class run:
            checkpoint_on_signal = True

    session = Record("session")
    session.start_step = 0
    with pytest.raises(RankLost):
        loop._stop(Cfg, session, Record("trainer"), Record("source"), Record("checkpoints"), 3, peers=Gone())
    assert calls == ["session.close"]


def test_resume_hint_names_the_newest_checkpoint(tmp_path):
    assert resume_hint(None) == ""
    assert resume_hint(tmp_path / "none") == f"{tmp_path / 'none'} has no checkpoint to continue from"
    run = _checkpointed(tmp_path / "run", 3, 12)
    assert resume_hint(run) == f"continue with: asyncrl train --resume {run} (its checkpoint of step 12)"


def test_the_launcher_names_the_rank_it_lost(tmp_path):
    from asyncrl.distributed.launch import lost_line

    run = _checkpointed(tmp_path / "run", 5)
    resume = resume_hint(run)
    # NCCL: the survivor was blocked in a collective until the agent's SIGKILL; the agent saw rank 1 first
    assert lost_line({1: -signal.SIGKILL, 0: -signal.SIGKILL}, resume) == (
        "asyncrl: trainer rank 1 was killed by SIGKILL (out of memory, or killed from outside); the other ranks "
        f"were stopped; continue with: asyncrl train --resume {run} (its checkpoint of step 5)")
    # gloo: the survivor ended on its own (status 1, saying nothing) in the agent's same look
    assert lost_line({0: 1, 1: -signal.SIGSEGV}, "", {0}).startswith("asyncrl: trainer rank 1 was killed by SIGSEGV")
    assert lost_line({1: 3, 0: -signal.SIGTERM}, resume).startswith("asyncrl: trainer rank 1 failed (exit status 3); ")


def test_under_the_launcher_a_survivor_leaves_the_lost_rank_to_it(job, tmp_path, monkeypatch):
    """A collective failed on a peer's death: the launcher, which saw which rank ended and how, says
    it; the survivor marks that it found one. Under a plain torchrun the survivor says it, with the
    checkpoint to continue from."""
    leader = job(0)
    leader.note_run(resume_hint(_checkpointed(tmp_path / "run", 7)))
    gone = RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer")
    plain = leader.fault(gone)
    assert not plain.quiet and str(plain).endswith(f"continue with: asyncrl train --resume {tmp_path / 'run'} "
                                                   "(its checkpoint of step 7)")
    said = tmp_path / "launch" / "said"
    said.parent.mkdir()
    monkeypatch.setenv(SAID_ENV, str(said))
    launched = leader.fault(gone)
    assert launched.quiet and (said.parent / "lost.0").exists() and not said.exists()
