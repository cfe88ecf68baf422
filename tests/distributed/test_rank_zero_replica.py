"""Rank 0 of a sharded run holds the policy in the generation dtype, not a second fp32 model: its
replica is bf16 when ``rollout.dtype`` is, refreshed after each step from the fp32 shards one
parameter at a time (never the whole model gathered at once, on any rank), and a checkpoint writes
the fp32 master weights from the shards, which a resumed run continues exactly."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from rendezvous import rendezvous_env  # noqa: E402
from test_torchrun import ENV, base, command  # noqa: E402


@pytest.fixture
def replica_run(tiny_policy, policy_and_batch, tmp_path):
    """Rank 0's record of one step of the leader/follower pair on gloo (tests/distributed/replica_case.py)."""
    model, tok, _ = tiny_policy
    _, batch = policy_and_batch
    out = tmp_path
    model.save_pretrained(out / "policy")
    tok.save_pretrained(out / "policy")
    torch.save(batch, out / "input.pt")
    env = {**os.environ, **rendezvous_env(out),
           "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, str(HERE / "replica_case.py"), str(rank), str(out)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(2)]
    logs = [proc.communicate(timeout=240)[0] for proc in procs]
    assert all(proc.returncode == 0 for proc in procs), "\n".join(logs)[-3000:]
    return torch.load(out / "replica.pt", weights_only=False)


def test_the_replica_is_bf16_equals_the_shards_after_a_step_and_is_gathered_one_parameter_at_a_time(replica_run):
    replica, master = replica_run["replica"], replica_run["master"]
    assert {str(p.dtype) for p in replica.values()} == {"torch.bfloat16"}
    assert master is not None and {str(t.dtype) for t in master.values()} == {"torch.float32"}
    assert sorted(master) == replica_run["replica_state_keys"]  # named as the policy's own state dict
    changed = [name for name in replica if not torch.equal(replica[name], replica_run["before"][name])]
    assert changed, "the step changed nothing: the test is vacuous"
    for name, value in replica.items():  # the fp32 shards gathered, cast: bit for bit
        assert torch.equal(value, master[name].to(torch.bfloat16)), name
    # no whole parameter outlives the next gather (rank 0's recorded; the others run the same loop)
    most_alive, dtypes, count = replica_run["step_gathers"]
    assert count == replica_run["n_params"] and most_alive == 0  # one at a time, each dropped before the next
    assert dtypes == ["torch.bfloat16"]  # gathered in the replica's dtype: half fp32's traffic
    most_alive, dtypes, count = replica_run["master_gathers"]
    assert count == replica_run["n_params"] and most_alive == 0 and dtypes == ["torch.float32"]


def _train(tmp_path: Path, *args: str) -> None:
    out = subprocess.run(command(2, *args), capture_output=True, text=True, cwd=tmp_path, env=ENV, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]


@pytest.mark.slow
def test_a_bf16_replica_run_checkpoints_fp32_weights_and_resumes_exactly(tmp_path, cache):
    bf16 = ("rollout.dtype=bfloat16", "run.checkpoint_every=2")
    _train(tmp_path, "train", *base(cache, "whole", 4), *bf16)
    _train(tmp_path, "train", *base(cache, "resumed", 2), *bf16)
    checkpoint = tmp_path / "runs" / "resumed" / "checkpoint"
    assert {str(t.dtype) for t in load_file(checkpoint / "model.safetensors").values()} == {"torch.float32"}
    assert json.loads((checkpoint / "config.json").read_text())["dtype"] == "float32"
    _train(tmp_path, "train", "--resume", str(tmp_path / "runs" / "resumed"), "trainer.steps=4")
    whole = load_file(tmp_path / "runs" / "whole" / "checkpoint" / "model.safetensors")
    resumed = load_file(tmp_path / "runs" / "resumed" / "checkpoint" / "model.safetensors")
    assert whole.keys() == resumed.keys()
    for name, value in whole.items():
        assert value.dtype == torch.float32 and torch.equal(resumed[name], value), name
    # fp32 weights that a bf16 copy could not hold: the master weights, not the replica, were saved
    assert any(not torch.equal(v, v.to(torch.bfloat16).float()) for v in whole.values())
