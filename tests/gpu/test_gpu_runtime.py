"""The runtime on a CUDA device (skipped without one; ``pytest -m gpu``): device discipline end to
end in every mode, async K = 0 ≡ sync on cuda, the CUDA IPC weight channel across processes, the
engine's CUDA generator, autocast training, and the vLLM engine when it is installed."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

TESTS = Path(__file__).parents[1]
sys.path.insert(0, str(TESTS / "foundation"))
sys.path.insert(0, str(TESTS / "runtime"))
from test_e2e_train import TINY  # noqa: E402

CUDA = [*TINY, "policy.device=cuda", "eval.every=0", "trainer.lr=0.0002"]


def train(tmp_path: Path, cache: str, name: str, *args: str):
    # fixed cuBLAS workspace: the same shapes take the same kernels in every process
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "CUBLAS_WORKSPACE_CONFIG": ":4096:8"}
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *CUDA, f"run.name={name}",
                           f"policy.cache_dir={cache}", *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / name
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if r["step"] > 0]  # step 0: the eval before training
    return run_dir, records, json.loads((run_dir / "summary.json").read_text())


def weights(run_dir: Path):
    from safetensors.torch import load_file

    return load_file(run_dir / "checkpoint" / "model.safetensors")


@pytest.mark.parametrize("mode,extra", [
    ("sync", []), ("simulated", ["async.lag=2"]),
    ("async", ["async.max_staleness=2", "async.chunk_tokens=4"]),
    ("async", ["rollout.dtype=bfloat16", "trainer.autocast=bfloat16"]),
])
def test_modes_end_to_end_on_cuda(tmp_path, cache, mode, extra):
    _, records, summary = train(tmp_path, cache, mode, f"run.mode={mode}", "trainer.steps=3", *extra)
    assert summary["steps"] == 3 and summary["device"] not in ("cpu", None)
    assert all(r["weight_publish_s"] >= 0 for r in records)
    # async: a step trains on units that may all have arrived during an earlier step (gen_tokens 0)
    assert sum(r["gen_tokens"] for r in records) > 0
    if mode != "async":
        assert all(r["gen_tokens"] > 0 for r in records)
    if mode == "async":
        assert summary["weight_publish_per_step_s"] < 0.5


def test_async_k0_equals_sync_on_cuda(tmp_path, cache):
    """Deterministic algorithms + the same kernels in both processes: bitwise equal weights."""
    common = ["trainer.steps=3", "run.deterministic=true"]
    sync_dir, sync_records, _ = train(tmp_path, cache, "sync", "run.mode=sync", *common)
    async_dir, async_records, _ = train(tmp_path, cache, "async", "run.mode=async", "async.max_staleness=0",
                                        *common)
    assert [r["reward_mean"] for r in sync_records] == [r["reward_mean"] for r in async_records]
    a, b = weights(sync_dir), weights(async_dir)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_channel_round_trip_across_processes(tiny_policy, dtype):
    from channel_check import round_trip

    seen, expected = round_trip(copy.deepcopy(tiny_policy[0]), "cuda", "cuda", dtype)
    assert [v for v, _ in seen] == [0, 3]
    for (_, sums), want in zip(seen, expected):
        for key in want:
            assert sums[key] == pytest.approx(want[key], rel=1e-5, abs=1e-5), key


def test_engine_and_trainer_on_cuda(tiny_policy):
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.policy.prompts import encode_problems
    from asyncrl.rollout import EngineSpec, make_engine, score
    from asyncrl.training.trainer import Learner

    model, tok, task = tiny_policy
    model = copy.deepcopy(model).cuda()
    spec = EngineSpec(max_new_tokens=8, temperature=1.0, device="cuda", dtype="bfloat16", chunk_tokens=4)
    engine = make_engine("transformers", spec, model=model, tokenizer=tok)
    assert engine.generator.device.type == "cuda"
    problems = task.problems("train")[:4]
    gen = engine.generate(encode_problems(tok, problems, 4), between_chunks=lambda: False)
    assert gen.completion_ids.device.type == "cpu"  # the engine's exit: CPU tensors
    batch = score(gen, problems, 4, task, tok)
    batch.rewards = torch.tensor([1.0, 0, 0, 0] * 4)
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=1e-3, autocast="bfloat16"), LossConfig())
    stats = trainer.step(batch)
    assert trainer.version == 1 and stats["skipped_updates"] == 0
    assert all(p.dtype == torch.float32 for p in model.parameters())  # fp32 master weights


# FlashAttention takes head sizes >= 32 in half precision only: a bf16 engine over a model of head_dim 64
# (the tests' tiny model has 16); the trainer keeps fp32 master weights under bf16 autocast
VLLM_MODEL = ["model.hidden_size=256", "model.num_heads=4", "model.num_kv_heads=2", "model.intermediate_size=512",
              "model.num_layers=2", "rollout.dtype=bfloat16", "trainer.autocast=bfloat16", "rollout.engine=vllm",
              "rollout.engine_kwargs={gpu_memory_utilization: 0.2, max_model_len: 256}"]


@pytest.mark.parametrize("mode", ["async", "sync"])  # sync: the evaluations generate through vLLM too
def test_vllm_engine_run_on_cuda(tmp_path, cache, mode):
    pytest.importorskip("vllm")
    _, records, summary = train(tmp_path, cache, f"vllm-{mode}", f"run.mode={mode}", *VLLM_MODEL, "trainer.steps=2")
    assert summary["steps"] == 2 and sum(r["gen_tokens"] for r in records) > 0
    assert summary["initial_eval_reward"] is not None and summary["final_eval_reward"] is not None
