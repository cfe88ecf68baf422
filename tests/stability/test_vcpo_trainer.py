"""VCPO through the trainer: hand-worked ESS, learning-rate scale and OPOB baseline on a real
(tiny) model, and async K = 0 ≡ sync with VCPO on."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cli_forks import run_cli  # tests/: the CLI forked from one imported copy
import torch
from safetensors.torch import load_file

from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout import EngineSpec, make_engine, score
from asyncrl.stability.config import VcpoConfig
from asyncrl.training.trainer import Learner

sys.path.insert(0, str(Path(__file__).parents[1] / "foundation"))
from test_e2e_train import TINY  # noqa: E402


@pytest.fixture()
def twin_batch(tiny_policy):
    """Two samples of one prompt with the SAME tokens (so the same score gradient g), whose
    behavior log-probs make the current policy's sequence weights w = [1, 3] (log-weight on the
    first token)."""
    model, tok, task = tiny_policy
    state = {k: v.clone() for k, v in model.state_dict().items()}
    problem = task.problems("train")[:1]
    engine = make_engine("transformers", EngineSpec(max_new_tokens=6, temperature=1.0), model=model, tokenizer=tok)
    gen = engine.generate(encode_problems(tok, problem, 1))
    batch = score(gen, problem, 1, task, tok)
    batch = batch.select(torch.tensor([0, 0]))
    batch.group_ids = torch.tensor([0, 0])
    batch.rewards = torch.tensor([1.0, 0.0])
    trainer = Learner(model, TrainerConfig(n_minibatches=1), LossConfig())
    with torch.no_grad():
        logp, _ = trainer.logprobs(batch)
    behav = logp.clone()
    behav[1, 0] -= math.log(3)  # π/π_behav = 3 on sequence 1
    batch.behav_logp = behav
    yield model, batch
    model.load_state_dict(state)


def test_ess_scales_the_learning_rate_of_the_step(twin_batch):
    model, batch = twin_batch
    cfg = TrainerConfig(n_minibatches=1, lr=1e-3, vcpo=VcpoConfig(enabled=True), prox="behav")
    trainer = Learner(model, cfg, LossConfig(name="tis"))
    seen = []
    real_step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: (seen.append([g["lr"] for g in trainer.optimizer.param_groups]),
                                              real_step(*a, **k))[1]
    stats = trainer.step(batch)
    # w = [1, 3]: ESS = 16 / 10, ρ = 0.8; lr · sqrt(0.8)
    assert stats["ess_frac"] == pytest.approx(0.8, rel=1e-4)
    assert stats["lr_scale"] == pytest.approx(math.sqrt(0.8), rel=1e-4)
    assert seen == [[pytest.approx(1e-3 * math.sqrt(0.8), rel=1e-4)]]
    assert [g["lr"] for g in trainer.optimizer.param_groups] == [1e-3]  # restored
    off = Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3, prox="behav"), LossConfig(name="tis"))
    assert off.step(batch)["lr_scale"] == 1.0  # measured, not applied, when VCPO is off


def test_opob_baseline_through_the_trainer(twin_batch):
    model, batch = twin_batch
    # equal tokens ⇒ equal ‖g‖², which cancels: b* = Σ w² R / Σ w² = (1·1 + 9·0) / 10 = 0.1
    trainer = Learner(model, TrainerConfig(n_minibatches=1, advantage="drgrpo", vcpo=VcpoConfig(opob=True)),
                      LossConfig())
    adv = trainer._advantages(batch.to(trainer.device))
    assert adv.tolist() == pytest.approx([0.9, -0.1], rel=1e-4)
    plain = Learner(model, TrainerConfig(n_minibatches=1, advantage="drgrpo"), LossConfig())._advantages(batch)
    assert plain.tolist() == pytest.approx([0.5, -0.5])  # the group mean, for contrast


def test_async_k0_equals_sync_with_vcpo_on(tmp_path, cache):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    common = [*TINY, "trainer.lr=0.0002", "eval.every=0", "trainer.steps=3", f"policy.cache_dir={cache}",
              "trainer.vcpo.enabled=true", "trainer.vcpo.opob=true", "trainer.ess_warning.threshold=0.99"]
    weights = {}
    for name, mode in [("sync", ["run.mode=sync"]), ("async", ["run.mode=async", "async.max_staleness=0"])]:
        proc = run_cli(["train", *common, *mode, f"run.name={name}"], tmp_path, env, timeout=400)
        assert proc.returncode == 0, proc.stderr[-3000:]
        weights[name] = load_file(tmp_path / "runs" / name / "checkpoint" / "model.safetensors")
        rows = [json.loads(line) for line in (tmp_path / "runs" / name / "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r["step"] > 0]  # step 0: the eval before training
        assert all(0 < r["lr_scale"] <= 1 and r["ess_frac"] > 0 for r in rows)
    assert all(torch.equal(weights["sync"][k], weights["async"][k]) for k in weights["sync"])


def _train(tmp_path, cache, name, *args):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = run_cli(["train", *TINY, "trainer.lr=0.001", "eval.every=0", "trainer.n_minibatches=1",
                    f"policy.cache_dir={cache}", f"run.name={name}", *args], tmp_path, env, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / name
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r["step"] > 0]  # step 0: the eval before training
    return run_dir, rows, json.loads((run_dir / "summary.json").read_text())


def test_ess_warning_stop_and_rollback_end_to_end(tmp_path, cache):
    """Simulated lag 2: step 1 is on-policy (ESS fraction ~1), later steps are stale (lower). A
    threshold just under 1 and a window of 2 fire the warning at step 3."""
    lagged = ["run.mode=simulated", "async.lag=2", "trainer.ess_warning.threshold=0.9999",
              "trainer.ess_warning.window=2"]
    run_dir, rows, summary = _train(tmp_path, cache, "stop", *lagged, "trainer.steps=6",
                                    "trainer.ess_warning.action=stop")
    assert rows[0]["ess_frac"] > 0.9999 > rows[1]["ess_frac"], "the premise of this test does not hold"
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[2]["ess_warning"] == 1
    assert summary["steps"] == 3 and summary["stopped_early"] and summary["ess_warning_steps"] == [3]
    assert (run_dir / "checkpoints" / "step-000003").is_dir()
    run_dir, rows, summary = _train(tmp_path, cache, "rollback", *lagged, "trainer.steps=4",
                                    "trainer.ess_warning.action=rollback", "run.checkpoint_every=1",
                                    "run.keep_checkpoints=0")
    assert rows[2]["ess_rollback_to"] == 1  # the newest checkpoint before the low stretch (steps 2-3)
    assert rows[3]["version"] == 5  # 4 steps + the rollback's own version
    assert summary["steps"] == 4 and not summary["stopped_early"]
