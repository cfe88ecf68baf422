"""Two trainer ranks (FSDP2 on gloo) give one process's update: the same gradients, weights and
logged statistics to 1e-6 (float32) for A-3PO, decoupled + recompute and GSPO with a KL penalty,
with and without micro-batches, and with shares uneven enough that a rank runs a stand-in pass."""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.distributed.world import World
from asyncrl.training.data_parallel import DataParallel, shares
from asyncrl.training.parallel import MicroBatch, SingleProcess

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from rendezvous import rendezvous_env  # noqa: E402
TIMES = ("train_time_s", "prox_time_s", "prox_error_time_s")


def test_shares_cover_the_rows_in_order_and_differ_by_at_most_one():
    assert shares(5, 2) == [(0, 3), (3, 5)]
    assert shares(4, 3) == [(0, 2), (2, 3), (3, 4)]
    assert shares(2, 3) == [(0, 1), (1, 2), (2, 2)]
    assert SingleProcess().rows_of(7, 3) == [MicroBatch(0, 3), MicroBatch(3, 6), MicroBatch(6, 7)]


def test_every_rank_runs_as_many_passes_with_stand_ins_where_its_share_ran_out():
    """Minibatches of 5 rows on 2 ranks, micro-batches of 1: shares 3 + 2, so rank 1 runs a third,
    stand-in pass (row 0, loss × 0); the real passes' losses count the world size (FSDP averages)."""
    assert DataParallel(World(0, 2, 0)).rows_of(5, 1) == [MicroBatch(0, 1), MicroBatch(1, 2), MicroBatch(2, 3)]
    rank1 = DataParallel(World(1, 2, 1))
    assert rank1.rows_of(5, 1) == [MicroBatch(3, 4), MicroBatch(4, 5), MicroBatch(0, 1, stand_in=True)]
    loss = torch.tensor(1.5)
    assert [rank1.scale(loss, micro).item() for micro in rank1.rows_of(5, 1)] == [3.0, 3.0, 0.0]
    assert rank1.rows_of(5, 0) == [MicroBatch(3, 5)]
    with pytest.raises(ValueError, match="cannot be shared by 2 ranks"):
        rank1.rows_of(1, 0)


def sharded_step(tmp_path: Path, case: str, micro: int, n_minibatches: int, world: int = 2, device: str = "cpu"):
    """(stats, weights, grads) of rank 0 of ``world`` FSDP2 ranks (dp_case.py) training tmp_path/input.pt."""
    env = {**os.environ, **rendezvous_env(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "dp_case.py"), str(rank), str(tmp_path), case, str(micro),
                               str(n_minibatches), str(world), device], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for rank in range(world)]
    logs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), "\n".join(logs)[-3000:]
    return torch.load(tmp_path / f"{case}-{micro}-{n_minibatches}.pt", weights_only=False)


def assert_same_stats(one: dict, other: dict, tol: float) -> None:
    assert set(one) == set(other)
    for key, value in one.items():
        if key not in TIMES and not (isinstance(value, float) and math.isnan(value)):
            assert other[key] == pytest.approx(value, rel=tol, abs=tol), key


def one_rank_and_plain(model, batch, tmp_path: Path, device: str = "cpu"):
    """((stats, weights) of one FSDP2 rank, (stats, weights) of the plain model) after one A-3PO
    step on ``device`` from the same start; weights on the CPU, ``model`` left there."""
    sys.path.insert(0, str(HERE))
    from dp_case import run_case

    start = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save((model, batch), tmp_path / "input.pt")
    sharded_stats, sharded_weights, _ = sharded_step(tmp_path, "a3po", 0, 2, world=1, device=device)
    model.load_state_dict(start)
    try:
        stats, weights, _ = run_case(model.to(device), batch.to(device), "a3po", 0, 2)
    finally:
        model.to("cpu")
    return (sharded_stats, sharded_weights), (stats, {name: w.cpu() for name, w in weights.items()})


def test_one_fsdp2_rank_gives_the_update_of_the_plain_model(policy_and_batch, tmp_path):
    """The sharded path at a world of one (what ``torchrun --nproc_per_node 1`` would shard): the
    FSDP2 root, the data-parallel seam and the gathers change nothing. tests/gpu/test_fsdp_cuda.py
    runs the same on CUDA with NCCL."""
    (sharded_stats, sharded_weights), (stats, weights) = one_rank_and_plain(*policy_and_batch, tmp_path)
    for name, weight in weights.items():
        torch.testing.assert_close(sharded_weights[name], weight, rtol=1e-6, atol=1e-6)
    assert_same_stats(stats, sharded_stats, 1e-6)


@pytest.mark.parametrize("case, micro, n_minibatches", [
    # the default suite keeps the two cases that hold the others' paths (micro-batches, a forward
    # pass for the proximal policy, a stand-in pass); make test-all runs all four
    pytest.param("a3po", 0, 2, marks=pytest.mark.slow), ("recompute", 3, 2),
    pytest.param("gspo_kl", 0, 2, marks=pytest.mark.slow),
    ("a3po", 1, 3),  # minibatches of 6, 5, 5 rows: shares 3 + 2, three micro-batches each: a stand-in pass
])
def test_two_ranks_give_the_update_of_one_process(policy_and_batch, tmp_path, case, micro, n_minibatches):
    sys.path.insert(0, str(HERE))
    from dp_case import run_case

    model, batch = policy_and_batch
    start = {k: v.clone() for k, v in model.state_dict().items()}
    torch.save((model, batch), tmp_path / "input.pt")
    two_stats, two_weights, two_grads = sharded_step(tmp_path, case, micro, n_minibatches)
    model.load_state_dict(start)
    one_stats, one_weights, one_grads = run_case(model, batch, case, 0, n_minibatches)
    assert len(one_grads) == len(two_grads) == n_minibatches
    for update_one, update_two in zip(one_grads, two_grads):
        assert len(update_one) == len(update_two)
        for g1, g2 in zip(update_one, update_two):
            torch.testing.assert_close(g2, g1, rtol=1e-6, atol=1e-6)
    assert one_weights.keys() == two_weights.keys()
    for name, weight in one_weights.items():
        torch.testing.assert_close(two_weights[name], weight, rtol=1e-6, atol=1e-6)
    assert_same_stats(one_stats, two_stats, 1e-6)
