"""The async runtime on a local Ray cluster (started and stopped by the run itself, loopback only)."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")
sys.path.insert(0, str(Path(__file__).parent))
from test_modes_e2e import train  # noqa: E402


# slow: test_ray_k0_equals_local_k0 runs the Ray backend end to end in the default suite; this one
# adds staleness 1 on Ray, whose bound the local backend's test_async_staleness_bound_holds checks
@pytest.mark.slow
def test_ray_backend_end_to_end(tmp_path, cache):
    run_dir, records = train(tmp_path, cache, "ray", "run.mode=async", "async.backend=ray",
                             "async.max_staleness=1", "trainer.steps=5", "trainer.prox=loglinear",
                             "loss.name=decoupled", timeout=420)
    assert len(records) == 5
    assert all(r["staleness_seq_max"] <= 1 for r in records)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "async" and summary["final_eval_reward"] is not None
    assert (run_dir / "checkpoint" / "model.safetensors").is_file()


def test_ray_k0_equals_local_k0(tmp_path, cache):
    """Same seed, K = 0: the Ray backend and the local one train to the same weights."""
    import torch
    from safetensors.torch import load_file

    local_dir, _ = train(tmp_path, cache, "local0", "run.mode=async", "async.max_staleness=0", "trainer.steps=3")
    ray_dir, _ = train(tmp_path, cache, "ray0", "run.mode=async", "async.backend=ray",
                       "async.max_staleness=0", "trainer.steps=3", timeout=420)
    a = load_file(local_dir / "checkpoint" / "model.safetensors")
    b = load_file(ray_dir / "checkpoint" / "model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
