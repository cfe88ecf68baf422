"""Faults of a torchrun job's ranks (docs/errors.md, "Trainer ranks under torchrun"): ranks whose
settings differ are refused before anything is written, in one line naming the key and each rank's
value; ``asyncrl train --nproc-per-node`` ends with the ranks' line and exit status instead of
torchrun's report; a rank that is only busy is waited for past ``trainer.fsdp.timeout_s``; a
SIGSTOPped rank ends the job within that bound plus torchrun's shutdown timeout, with one line and no
process left; SIGTERM while a rank is stopped ends the job within the shutdown timeout; a SIGKILLed
rank is named by the launcher with the checkpoint to continue from, and a SIGTERM after it writes no
checkpoint and says so in one line (tests/distributed/test_nccl_faults.py: the same without torchrun)."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_torchrun import ENV, _gone_within, _port, base, rank_pids  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from test_resume import steps_done, wait_for_step  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from resume_campaign import MARK  # noqa: E402

from asyncrl.config import load_config  # noqa: E402
from asyncrl.distributed.agreement import disagreement, flat_settings  # noqa: E402
from asyncrl.distributed.launch import job_status  # noqa: E402

SHUTDOWN_S = 10  # torchrun's shutdown timeout on a signal in these tests (its default is 30 s)
FAILED_WAIT_S = 30  # how long torchrun's agent waits for the other ranks once one has failed (fixed)
TIMEOUT_S = 8  # trainer.fsdp.timeout_s in these tests


def launcher(*args: str) -> list[str]:
    return [sys.executable, "-m", "asyncrl", "train", "--nproc-per-node", "2", *args]


def ours(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("asyncrl:")]


def test_disagreement_names_the_first_differing_key_and_every_ranks_value():
    lr_low = flat_settings(load_config(None, ["trainer.lr=3e-05"]))
    lr_high = flat_settings(load_config(None, ["trainer.lr=0.0001", "trainer.n_minibatches=2"]))
    key, message = disagreement([lr_low, lr_high, lr_low, lr_low])
    assert key == "trainer.lr"
    assert message == ("ranks disagree: ranks 0, 2, 3 have 3e-05, rank 1 has 0.0001 "
                       "(and 1 more: trainer.n_minibatches)")
    assert disagreement([lr_high, lr_low, lr_low, lr_low])[1].startswith(
        "ranks disagree: rank 0 has 0.0001, ranks 1-3 have 3e-05")


def test_job_status_is_the_first_ranks_own_error_else_the_signal():
    assert job_status({0: 2, 1: 2}) == 2
    assert job_status({1: 1, 0: -9}) == 1  # the survivor that said why, not the rank it lost
    assert job_status({0: -9, 1: -15}) == 128 + 9


@pytest.fixture
def follower(monkeypatch):
    """Rank 1's Peers against a store of the test's own (torchrun's agent's stand-in), and a
    connection playing rank 0: (peers, rank 0's store)."""
    import torch

    from asyncrl.distributed.liveness import Peers, job_store
    from asyncrl.distributed.world import World

    server = torch.distributed.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(server.port))
    peers = Peers(World(rank=1, size=2), timeout_s=30, token="t")
    yield peers, job_store("t", 30)
    peers.close()


def _beating(store, stop):
    """Rank 0's heartbeat, every 0.2 s until ``stop`` is set."""
    import threading

    def beat():
        while not stop.wait(0.2):
            store.add("beat/0", 1)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    return thread


@pytest.mark.slow  # a torchrun fault path: make test-all
def test_a_waiting_rank_follows_a_live_rank_0_and_leaves_a_silent_one_after_a_stop_signal(follower):
    import threading

    from asyncrl.distributed.world import RankTimeout

    peers, leader = follower
    stop = threading.Event()
    _beating(leader, stop)
    threading.Timer(3, leader.set, ("command/0", "1")).start()
    started = time.monotonic()
    peers.await_command()  # 3 s alone on rank 0, its heartbeat going: waited for
    assert 2.5 < time.monotonic() - started < 10
    peers.stop_signalled(signal.SIGTERM, None)
    stop.set()  # rank 0's heartbeat stops (SIGSTOP, SIGKILL): 6 s after a stop signal, not timeout_s=30
    started = time.monotonic()
    with pytest.raises(RankTimeout, match="trainer rank 1: no answer from trainer rank 0 within 6 s of a stop signal"):
        peers.await_command()
    assert 5 < time.monotonic() - started < 15


def test_a_waiting_rank_ends_quietly_when_rank_0_ends(follower):
    from asyncrl.distributed.world import RankLost

    peers, leader = follower
    leader.set("ended/0", "1")  # what rank 0's Peers.close() writes, whatever ended it
    with pytest.raises(RankLost) as caught:
        peers.await_command()
    assert caught.value.quiet  # rank 0 says why it ended


def _per_rank_script(tmp_path: Path, key: str, values: tuple[str, str]) -> Path:
    """A rank's command that appends ``key=<this rank's value>`` (what two nodes started with two
    different command lines, or config files, amount to)."""
    script = tmp_path / "per_rank.sh"
    script.write_text(f'#!/bin/sh\nif [ "$RANK" = 0 ]; then v={values[0]}; else v={values[1]}; fi\n'
                      f'exec {sys.executable} -m asyncrl "$@" {key}=$v\n')
    script.chmod(0o755)
    return script


@pytest.mark.slow  # torchrun jobs: make test-all
@pytest.mark.parametrize("key, values", [("trainer.lr", ("3e-05", "0.0001")), ("trainer.n_minibatches", ("2", "4"))])
def test_ranks_that_disagree_are_refused_before_anything_is_written(tmp_path, cache, key, values):
    script = _per_rank_script(tmp_path, key, values)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr",
                           "127.0.0.1", "--master_port", _port(), "--no-python", str(script), "train",
                           *base(cache, "split", 3)],
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode != 0  # torchrun's own status (1); --nproc-per-node gives the ranks' (2)
    assert ours(proc.stderr) == [f"asyncrl: config error: {key}: ranks disagree: rank 0 has {values[0]}, "
                                 f"rank 1 has {values[1]}"], proc.stderr[-3000:]
    assert "[rank0]: Traceback" not in proc.stderr and "[rank1]: Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_launcher_ends_with_the_ranks_line_and_status(tmp_path, cache):
    proc = subprocess.run(launcher(*base(cache, "bad", 3), "trainer.n_minibatches=3"), capture_output=True, text=True,
                          cwd=tmp_path, env=ENV, timeout=300)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.splitlines() == ["asyncrl: config error: trainer.n_minibatches: must divide the batch size 8 "
                                        "(= rollout.prompts_per_step × samples_per_prompt)"]
    assert not (tmp_path / "runs").exists()


def test_launcher_refuses_a_bad_count(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "asyncrl", "train", "--nproc-per-node", "0"], capture_output=True,
                          text=True, cwd=tmp_path, env=ENV, timeout=60)
    assert proc.returncode == 2 and proc.stderr == "asyncrl: --nproc-per-node: must be >= 1\n"


SLOW_REWARD = """import time
calls = []

def slow(completions, **kw):
    calls.append(1)
    if len(calls) <= 2:  # the start-up check, then the first batch (or evaluation)
        time.sleep(6)
    return [0.0] * len(completions)
"""


@pytest.mark.slow
def test_a_busy_rank_0_is_waited_for_past_the_timeout(tmp_path, cache):
    """Rank 0 alone for 6 s in each of its first two reward calls while the other rank waits for its
    next command: that wait is bounded by rank 0's heartbeat, not by timeout_s=3."""
    (tmp_path / "slow_reward.py").write_text(SLOW_REWARD)
    proc = subprocess.run(launcher(*base(cache, "busy", 2), "trainer.fsdp.timeout_s=3",
                                   f"reward.funcs=[{tmp_path / 'slow_reward.py'}:slow]"),
                          capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert steps_done(tmp_path / "runs" / "busy" / "metrics.jsonl") == 2


def _stop_a_rank(tmp_path: Path, cache: str, victim: int, *extra: str, timeout_s: int = TIMEOUT_S):
    """A two-rank launch past its second step, then ``victim`` SIGSTOPped: (process, marker, run dir)."""
    marker = f"stop-{victim}-{os.getpid()}-{time.monotonic_ns()}"
    run_dir = tmp_path / "runs" / "stop"
    proc = subprocess.Popen(launcher(*base(cache, "stop", 200), f"trainer.fsdp.timeout_s={timeout_s}", *extra),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, MARK: marker, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(SHUTDOWN_S)})
    wait_for_step(proc, run_dir / "metrics.jsonl", 2)
    pids = rank_pids(proc.pid)
    assert sorted(pids) == [0, 1], pids
    os.kill(pids[victim], signal.SIGSTOP)
    return proc, marker, run_dir


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1])
def test_a_stopped_rank_ends_the_job_within_the_bound(tmp_path, cache, victim):
    proc, marker, run_dir = _stop_a_rank(tmp_path, cache, victim)
    started = time.monotonic()
    _, err = proc.communicate(timeout=180)
    elapsed = time.monotonic() - started
    # the timeout, naming the rank (its heartbeat's silence); then the agent SIGTERMs the stopped rank,
    # and SIGKILLs it FAILED_WAIT_S later
    assert elapsed < TIMEOUT_S + FAILED_WAIT_S + 20, elapsed
    assert proc.returncode == 1, err[-3000:]
    assert ours(err) == [f"asyncrl: trainer rank {1 - victim}: no answer from trainer rank {victim} within "
                         f"trainer.fsdp.timeout_s={TIMEOUT_S} s (its heartbeat stopped: a stopped or frozen "
                         "process); the job ends"], err[-3000:]
    assert "Traceback" not in err and "ChildFailedError" not in err, err[-3000:]
    assert _gone_within(marker, 10) == set(), "a process outlived the job"
    assert not (run_dir / "summary.json").exists()


@pytest.mark.slow
def test_sigterm_with_a_stopped_rank_ends_within_the_shutdown_timeout(tmp_path, cache):
    """No checkpoint can be written (every rank writes its optimizer shard): torchrun's agent ends
    every rank after its shutdown timeout, one line says so, and the newest checkpoint stays whole.
    trainer.fsdp.timeout_s is above the shutdown timeout, as by default (300 s and 30 s): rank 0 is
    still waiting for the stopped rank when the agent kills it."""
    proc, marker, run_dir = _stop_a_rank(tmp_path, cache, 1, "run.checkpoint_every=1", timeout_s=60)
    time.sleep(1)
    proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    _, err = proc.communicate(timeout=180)
    assert time.monotonic() - started < SHUTDOWN_S + 15
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    lines = ours(err)
    assert lines == [f"asyncrl: stopped by SIGTERM: 2 trainer rank(s) did not end within torchrun's shutdown "
                     f"timeout ({SHUTDOWN_S} s) and were killed (a stopped or hung rank); no checkpoint of this stop"], \
        err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert _gone_within(marker, 10) == set(), "a process outlived the job"
    newest = (run_dir / "checkpoint").resolve()
    assert newest.name.startswith("step-") and not newest.name.endswith(".tmp")
    assert len(list((newest / "optimizer").glob("*.distcp"))) == 2


def _launch_marked(tmp_path: Path, cache: str, name: str, *extra: str):
    """A two-rank ``asyncrl train --nproc-per-node 2`` checkpointing every step, past its second
    step: (process, marker, run dir, {rank: pid})."""
    marker = f"{name}-{os.getpid()}-{time.monotonic_ns()}"
    run_dir = tmp_path / "runs" / name
    proc = subprocess.Popen(launcher(*base(cache, name, 200), "run.checkpoint_every=1", *extra),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**ENV, MARK: marker})
    wait_for_step(proc, run_dir / "metrics.jsonl", 2)
    pids = rank_pids(proc.pid)
    assert sorted(pids) == [0, 1], pids
    return proc, marker, run_dir, pids


def _newest_step(run_dir: Path) -> int:
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert not [n for n in names if n.endswith(".tmp")], names  # no checkpoint half-written
    return int(names[-1].removeprefix("step-"))


@pytest.mark.slow
def test_the_launcher_names_a_killed_rank_and_where_the_run_continues(tmp_path, cache):
    """SIGKILL of rank 1: rank 0's collective fails; the one line is the launcher's, which saw rank 1
    end, and names it, the signal and the checkpoint ``--resume`` continues from. What a NCCL job
    prints too, where rank 0 stays blocked in the collective until the agent's SIGKILL."""
    proc, marker, run_dir, pids = _launch_marked(tmp_path, cache, "lost")
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - started < 30 and proc.returncode != 0, err[-3000:]
    step = _newest_step(run_dir)
    assert ours(err) == ["asyncrl: trainer rank 1 was killed by SIGKILL (out of memory, or killed from outside); "
                         "the other ranks were stopped; continue with: asyncrl train --resume runs/lost (its "
                         f"checkpoint of step {step})"], err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    assert _gone_within(marker, 10) == set(), "a process outlived the job"


SLEEP_AFTER_STEP_2 = """import pathlib, time
calls = []

def slow(completions, **kw):
    calls.append(1)
    if len(calls) == 6:  # past the start-up checks and a few steps
        pathlib.Path("{mark}").touch()
        time.sleep(8)
    return [0.0] * len(completions)
"""


@pytest.mark.slow
def test_sigterm_after_a_lost_rank_skips_the_checkpoint_in_one_line(tmp_path, cache):
    """Rank 1 dies while rank 0 scores a batch (no collective under way); torchrun's agent SIGTERMs
    rank 0 at once. Rank 0's next command waits for a roll call first, which rank 1 does not answer:
    rank 0 ends in one line naming it and the last checkpoint, writes none (it needs every rank's
    shard) and sends nothing into a collective with a dead rank (on NCCL: a hang until SIGKILL)."""
    mark = tmp_path / "scoring"
    (tmp_path / "slow_reward.py").write_text(SLEEP_AFTER_STEP_2.replace("{mark}", str(mark)))
    proc, marker, run_dir, pids = _launch_marked(tmp_path, cache, "term",
                                                 f"reward.funcs=[{tmp_path / 'slow_reward.py'}:slow]")
    deadline = time.monotonic() + 120
    while not mark.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mark.exists()
    step = _newest_step(run_dir)  # that of the step before the one being scored
    os.kill(pids[1], signal.SIGKILL)
    started = time.monotonic()
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - started < 30 and proc.returncode == 1, err[-3000:]
    assert ours(err) == ["asyncrl: trainer rank 0: trainer rank 1 does not answer (no heartbeat for 6 s: killed or "
                         "stopped); no checkpoint of this stop, which needs every rank; continue with: asyncrl train "
                         f"--resume runs/term (its checkpoint of step {step})"], err[-3000:]
    assert _newest_step(run_dir) == step and "Traceback" not in err, err[-3000:]
    assert _gone_within(marker, 10) == set(), "a process outlived the job"
