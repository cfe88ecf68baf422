"""``torchrun --nproc_per_node 2 -m asyncrl train``: two trainer ranks (FSDP2 on gloo) train the
run one process trains. Sync mode: the same batches (rank 0 generates them), every prompt group
trained once (ledger), the same weights after five steps to 1e-5 and the same logged statistics; a
world-2 run killed with SIGKILL resumes at world 1 and at world 2 to the uninterrupted run's weights."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))
from test_e2e_train import TINY  # noqa: E402
from test_resume import comparable, rows, steps_done, wait_for_step  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from campaign_common import rank_pids  # noqa: E402
from resume_campaign import MARK, alive, descendants, marked  # noqa: E402

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
STATS = ("loss", "grad_norm", "ess_frac", "clipped_tokens", "entropy", "reward_mean")


def _port() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


def command(world: int, *args: str) -> list[str]:
    if world == 1:
        return [sys.executable, "-m", "asyncrl.cli", *args]
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(world),  # as docs/scaling.md
            "--master_addr", "127.0.0.1", "--master_port", _port(), "-m", "asyncrl", *args]


def train(tmp_path: Path, world: int, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run(command(world, *args), capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(run_dir / "checkpoint" / "model.safetensors")


def assert_same_weights(a: dict, b: dict, tol: float = 1e-5) -> None:
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(b[name], a[name], rtol=tol, atol=tol)


def base(cache: str, name: str, steps: int) -> list[str]:
    return [*TINY, f"policy.cache_dir={cache}", f"run.name={name}", f"trainer.steps={steps}", "eval.every=0"]


def test_two_ranks_train_the_run_of_one(tmp_path, cache):
    one = train(tmp_path, 1, "train", *base(cache, "one", 5))
    two = train(tmp_path, 2, "train", *base(cache, "two", 5))
    assert len(two.stdout.strip().splitlines()) == 1, two.stdout  # rank 0 reports; the other rank is quiet
    assert json.loads(two.stdout)["run_dir"] == "runs/two" and json.loads(one.stdout)["steps"] == 5
    assert_same_weights(weights(tmp_path / "runs" / "one"), weights(tmp_path / "runs" / "two"))
    ledger_one, ledger_two = rows(tmp_path / "runs/one/ledger.jsonl"), rows(tmp_path / "runs/two/ledger.jsonl")
    assert ledger_one == ledger_two  # the same prompt groups, each trained at one step
    metrics_one, metrics_two = rows(tmp_path / "runs/one/metrics.jsonl"), rows(tmp_path / "runs/two/metrics.jsonl")
    assert any(r.get("frac_zero_adv_groups", 1) < 1 for r in metrics_one), "no reward signal: test is vacuous"
    for a, b in zip(metrics_one, metrics_two, strict=True):
        for key in STATS:
            if key in a:
                assert b[key] == pytest.approx(a[key], rel=1e-5, abs=1e-5), (a["step"], key)


@pytest.mark.slow
def test_world_two_killed_resumes_at_world_one_and_two(tmp_path, cache):
    steps = 8
    train(tmp_path, 1, "train", *base(cache, "whole", steps), "trainer.lr=0.0002")
    killed = tmp_path / "runs" / "killed"
    proc = subprocess.Popen(command(2, "train", *base(cache, "killed", steps), "trainer.lr=0.0002",
                                    "run.checkpoint_every=1"),
                            cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_for_step(proc, killed / "metrics.jsonl", 2)
    ranks = descendants(proc.pid)
    assert len(ranks) >= 2, ranks
    proc.kill()  # torchrun's agent: its ranks (each in a session of its own) go with it
    proc.communicate()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in ranks) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(alive(pid) for pid in ranks), "a rank outlived torchrun"
    assert not (killed / "summary.json").exists()
    # the optimizer state as DCP shards, one file per rank: resumed below at world 1 and 2
    assert len(list((killed / "checkpoint" / "optimizer").glob("*.distcp"))) == 2
    shutil.copytree(killed, tmp_path / "runs" / "killed2", symlinks=True)  # "checkpoint" is a link
    train(tmp_path, 1, "train", "--resume", str(killed))
    train(tmp_path, 2, "train", "--resume", str(tmp_path / "runs" / "killed2"))
    whole = weights(tmp_path / "runs" / "whole")
    for run in ("killed", "killed2"):
        assert_same_weights(whole, weights(tmp_path / "runs" / run))
        assert rows(tmp_path / "runs" / run / "ledger.jsonl") == rows(tmp_path / "runs" / "whole" / "ledger.jsonl")
        assert len(comparable(rows(tmp_path / "runs" / run / "metrics.jsonl"))) == steps + 1


@pytest.mark.slow
@pytest.mark.parametrize("victim", [0, 1])
def test_sigkill_of_a_rank_ends_the_job_in_one_line_and_leaves_no_process(tmp_path, cache, victim):
    run_dir = tmp_path / "runs" / "victim"
    proc = subprocess.Popen(command(2, "train", *base(cache, "victim", 200)), cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for_step(proc, run_dir / "metrics.jsonl", 2)
    pids = rank_pids(proc.pid)
    assert sorted(pids) == [0, 1], pids
    os.kill(pids[victim], signal.SIGKILL)
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30 and proc.returncode != 0
    assert not any(alive(pid) for pid in pids.values()), "a rank outlived the job"
    ours = [line for line in err.splitlines() if line.startswith("asyncrl:")]
    if victim == 1:  # rank 0 says it once, in one line; a dead rank 0 says nothing
        assert len(ours) == 1 and "another rank of the job failed or was killed" in ours[0], err[-2000:]
    assert "[rank0]: Traceback" not in err and "[rank1]: Traceback" not in err, err[-3000:]


def _marked_launch(tmp_path: Path, marker: str, *args: str) -> subprocess.Popen:
    """A world-2 torchrun whose every process (ranks, rollout workers, their helpers) carries
    ``MARK=marker`` in its environment, so a process reparented after its parent died is still found."""
    return subprocess.Popen(command(2, "train", *args), cwd=tmp_path, env={**ENV, MARK: marker},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _gone_within(marker: str, bound_s: float) -> set[int]:
    """The launch's processes still alive after ``bound_s`` (then killed, so no test leaks them)."""
    deadline = time.monotonic() + bound_s
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = marked(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    return left


ASYNC = ("run.mode=async", "async.n_workers=2", "async.max_staleness=2", "trainer.prox=loglinear",
         "loss.name=decoupled")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["local", "ray"])
@pytest.mark.parametrize("victim", [0, 1])
def test_sigkill_of_a_rank_in_an_async_run_leaves_no_worker(tmp_path, cache, victim, backend):
    """Async, two trainer ranks, two rollout workers (processes of rank 0, or Ray actors of rank 0's
    private cluster): SIGKILL of either rank ends the whole job within 30 s, and no rank, worker,
    Ray server or helper process outlives it by 10 s."""
    if backend == "ray":
        pytest.importorskip("ray")
    marker = f"async-kill-{victim}-{backend}-{os.getpid()}"
    proc = _marked_launch(tmp_path, marker, *base(cache, "victim", 200), *ASYNC, f"async.backend={backend}")
    wait_for_step(proc, tmp_path / "runs" / "victim" / "metrics.jsonl", 2)
    pids = rank_pids(proc.pid)
    assert sorted(pids) == [0, 1], pids
    assert len(marked(marker)) >= 5, "expected torchrun, two ranks and two workers"
    os.kill(pids[victim], signal.SIGKILL)
    started = time.monotonic()
    _, err = proc.communicate(timeout=60)
    assert time.monotonic() - started < 30 and proc.returncode != 0
    assert _gone_within(marker, 10) == set(), "a process outlived the job"
    assert "[rank0]: Traceback" not in err and "[rank1]: Traceback" not in err, err[-3000:]


@pytest.mark.slow
def test_sigterm_to_torchrun_checkpoints_once_and_resumes(tmp_path, cache):
    """SIGTERM to torchrun's agent (what Slurm and Kubernetes send): rank 0 writes one checkpoint of
    the step it finished, every rank and worker ends, one line says how to resume; ``--resume`` then
    continues the run with no prompt group trained twice."""
    marker = f"term-{os.getpid()}"
    run_dir = tmp_path / "runs" / "term"
    proc = _marked_launch(tmp_path, marker, *base(cache, "term", 200), *ASYNC, "run.checkpoint_every=0")
    wait_for_step(proc, run_dir / "metrics.jsonl", 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert _gone_within(marker, 10) == set(), "a process outlived the job"
    ours = [line for line in err.splitlines() if line.startswith("asyncrl:")]
    assert len(ours) == 1 and "SIGTERM" in ours[0] and "--resume" in ours[0], err[-3000:]
    # torchrun's agent reports the signal with a traceback of its own; the ranks print none
    assert "[rank0]: Traceback" not in err and "[rank1]: Traceback" not in err, err[-3000:]
    done = steps_done(run_dir / "metrics.jsonl")
    saved = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert saved == [f"step-{done:06d}"], saved  # once: the step it finished, no other
    assert len(list((run_dir / "checkpoints" / saved[0] / "optimizer").glob("*.distcp"))) == 2
    resumed = train(tmp_path, 2, "train", "--resume", str(run_dir), f"trainer.steps={done + 2}")
    assert json.loads(resumed.stdout)["steps"] == done + 2
    ledger = rows(run_dir / "ledger.jsonl")
    assert [r["step"] for r in ledger] == list(range(1, done + 3))
    groups = [g for r in ledger for g in r["consumed"] + r["dropped"]]
    assert len(groups) == len(set(groups))


@pytest.mark.slow
def test_two_node_job_on_loopback(tmp_path, cache):
    """``torchrun --nnodes 2`` with two agents on 127.0.0.1 and c10d rendezvous trains the one-process
    run; the ranks listen on loopback only, and nothing outlives the job. torchrun's own rendezvous
    store (in an agent) listens on every interface whatever the address it is given (docs/scaling.md)."""
    psutil = pytest.importorskip("psutil")
    one = train(tmp_path, 1, "train", *base(cache, "one", 5))
    assert json.loads(one.stdout)["steps"] == 5
    port = _port()
    agents = [subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
                                "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "job",
                                "--local-addr", "127.0.0.1", "-m", "asyncrl", "train", *base(cache, "nodes", 5)],
                               cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    ranks, listening = {}, set()
    while any(agent.poll() is None for agent in agents):
        for agent in agents:
            try:
                family = psutil.Process(agent.pid).children(recursive=True)
            except psutil.Error:
                continue
            for member in family:
                try:
                    ranks.setdefault(member.pid, member.create_time())
                    listening |= {(member.pid, c.laddr.ip) for c in member.net_connections(kind="inet")
                                  if c.status == psutil.CONN_LISTEN}
                except psutil.Error:
                    continue
        time.sleep(0.2)
    outs = [agent.communicate() for agent in agents]
    assert all(agent.returncode == 0 for agent in agents), "\n".join(err[-2000:] for _, err in outs)
    reports = [out for out, _ in outs if out.strip()]
    assert len(reports) == 1 and json.loads(reports[0])["steps"] == 5  # rank 0's node reports, once
    assert len(ranks) >= 2 and listening, (ranks, listening)
    assert [(pid, ip) for pid, ip in listening if ip not in ("127.0.0.1", "::ffff:127.0.0.1")] == []
    assert not any(alive(pid) for pid in ranks)
    assert_same_weights(weights(tmp_path / "runs" / "one"), weights(tmp_path / "runs" / "nodes"))


@pytest.mark.slow
def test_async_world_two_trains_every_group_once_and_loses_none(tmp_path, cache):
    """Async with two trainer ranks and two rollout workers, staleness up to 2: the ledger shows
    every generated prompt group either trained once or dropped as too stale, none twice and none
    missing, with stale data actually trained."""
    steps = 6
    run = train(tmp_path, 2, "train", *base(cache, "async2", steps), "run.mode=async", "async.n_workers=2",
                "async.max_staleness=2", "trainer.prox=loglinear", "loss.name=decoupled")
    assert json.loads(run.stdout)["steps"] == steps
    ledger = rows(tmp_path / "runs" / "async2" / "ledger.jsonl")
    assert [row["step"] for row in ledger] == list(range(1, steps + 1))
    consumed = [g for row in ledger for g in row["consumed"]]
    dropped = [g for row in ledger for g in row["dropped"]]
    assert len(set(consumed)) == len(consumed)  # no group trained twice
    assert not set(consumed) & set(dropped)
    # none lost: every group issued before the last step's batch was trained or dropped (later ones
    # may still have been in flight when the run ended)
    assert set(range(min(ledger[-1]["consumed"]))) <= set(consumed + dropped)
    metrics = rows(tmp_path / "runs" / "async2" / "metrics.jsonl")
    assert any(r.get("staleness_seq_max", 0) > 0 for r in metrics), "no stale batch: the test is vacuous"
