"""Precision settings off the trainer: TF32 on CUDA only, evaluation and the warm start under
autocast on CUDA only, and simulated mode's past versions held in the generation dtype, on the
device or in host memory, resumed exactly."""

import pytest
import torch

from asyncrl.training import evaluation
from asyncrl.config import load_config
from asyncrl.training.evaluation import EvalResult, eval_autocast_dtype, eval_metrics
from asyncrl.policy import model as policy_model
from asyncrl.policy.lora import export_state_dict
from asyncrl.policy.prompts import encode_problems
from asyncrl.training.pretrain import warm_start_autocast
from asyncrl.rollout.engine import EngineSpec, make_engine
from asyncrl.runtime.sources.lockstep import LaggedPolicies


@pytest.fixture()
def fake_cuda(monkeypatch):
    """A machine that says it has one CUDA device; records the calls to enable_tf32."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(policy_model, "enable_tf32", lambda: calls.append(True))
    return calls


def test_tf32_is_set_when_a_cuda_run_checks_its_device_and_never_on_cpu(fake_cuda):
    policy_model.check_device("cpu")
    assert fake_cuda == []
    assert policy_model.check_device("cuda:0").type == "cuda"
    assert fake_cuda == [True]


def test_enable_tf32_switches_cuda_matmuls_only():
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.mkldnn.matmul.fp32_precision
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        policy_model.enable_tf32()
        assert torch.backends.cuda.matmul.allow_tf32
        assert torch.backends.mkldnn.matmul.fp32_precision == before[1]  # CPU matmuls as they were
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before[0]


@pytest.mark.parametrize("overrides, expected", [
    ([], None),  # the CPU: never
    (["rollout.dtype=bfloat16", "trainer.autocast=bfloat16"], None),
    (["policy.device=cuda"], None),  # float32 everywhere
    (["policy.device=cuda", "rollout.dtype=bfloat16"], torch.bfloat16),  # as the rollouts generate
    (["policy.device=cuda", "trainer.autocast=float16"], torch.float16),  # as the trainer computes
    (["policy.device=cuda", "rollout.dtype=bfloat16", "trainer.autocast=float16"], torch.bfloat16),
    (["policy.device=cuda", "policy.dtype=bfloat16", "trainer.autocast=float16"], None),  # bf16 weights
])
def test_eval_autocast_dtype(overrides, expected):
    assert eval_autocast_dtype(load_config(None, overrides)) == expected


@pytest.mark.parametrize("dtype", [None, torch.bfloat16])
def test_evaluation_generates_under_the_autocast_dtype(dtype, tiny_policy, monkeypatch):
    model, tokenizer, task = tiny_policy
    seen = []

    def fake_generate_and_score(engine, tok, task_, problems, **_):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return EvalResult(problems, [["x"]] * len(problems), [[1.0]] * len(problems))

    monkeypatch.setattr(evaluation, "generate_and_score", fake_generate_and_score)
    monkeypatch.setattr(evaluation, "eval_autocast_dtype", lambda cfg: dtype)
    cfg = load_config(None, ["eval.greedy=true"])
    metrics, _ = eval_metrics(model, tokenizer, task, task.problems("eval")[:2], cfg)
    assert metrics["eval_reward"] == 1.0 and len(seen) == 2  # sampled and greedy
    assert all(enabled == (dtype is not None) for enabled, _ in seen)
    if dtype is not None:
        assert all(used == dtype for _, used in seen)
    assert not torch.is_autocast_enabled("cpu")


def test_warm_start_autocasts_on_cuda_only():
    assert warm_start_autocast("cpu") is None
    assert warm_start_autocast(torch.device("cuda", 0)) == torch.bfloat16


def _weights_now(model):
    return {k: v.detach().clone() for k, v in export_state_dict(model).items()}


def test_snapshots_in_float32_on_cpu_are_exact_copies(tiny_policy):
    model, _, _ = tiny_policy
    policies = LaggedPolicies(model, lag=1, policy_buffer=0, seed=0, dtype=torch.float32)
    weights, version = policies.select(0)
    assert version == 0
    for name, value in _weights_now(model).items():
        assert torch.equal(weights[name], value) and weights[name].dtype == torch.float32
        assert weights[name].data_ptr() != dict(model.named_parameters()).get(name, value).data_ptr()


@pytest.mark.parametrize("on_host", [False, True])
def test_snapshots_in_the_generation_dtype_resume_exactly(on_host, tiny_policy):
    model, _, _ = tiny_policy
    policies = LaggedPolicies(model, lag=2, policy_buffer=0, seed=0, dtype=torch.bfloat16, on_host=on_host)
    for version in (1, 2, 3):
        policies.record(model, version)
    assert list(policies.snapshots) == [1, 2, 3]  # lag + 1 kept
    weights, chosen = policies.select(3)
    assert chosen == 1
    assert all(t.dtype == torch.bfloat16 and t.device.type == "cpu" for t in weights.values())
    assert not any(t.is_pinned() for t in weights.values())  # pinned only for a model on CUDA
    expected = {k: v.to(torch.bfloat16) for k, v in _weights_now(model).items()}
    assert all(torch.equal(weights[k], expected[k]) for k in expected)
    resumed = LaggedPolicies(model, lag=2, policy_buffer=0, seed=5, dtype=torch.bfloat16, on_host=on_host)
    resumed.load_state_dict(policies.state_dict())
    assert list(resumed.snapshots) == [1, 2, 3] and resumed.rng.getstate() == policies.rng.getstate()
    assert all(torch.equal(resumed.snapshots[v][k], policies.snapshots[v][k])
               for v in (1, 2, 3) for k in expected)


def test_simulated_mode_snapshots_setting():
    assert not load_config(None, []).async_.snapshots_on_host
    assert load_config(None, ["async.snapshots_on_host=true"]).async_.snapshots_on_host


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_snapshots_of_a_cuda_model_are_pinned_and_generate_the_same(tiny_policy):
    model, tokenizer, task = tiny_policy
    cuda_model = policy_model.plain_copy(model, "cuda", torch.float32)
    outputs = []
    for on_host in (False, True):
        policies = LaggedPolicies(cuda_model, lag=0, policy_buffer=0, seed=0, dtype=torch.bfloat16, on_host=on_host)
        weights, _ = policies.select(0)
        assert all(t.is_pinned() == on_host and t.device.type == ("cpu" if on_host else "cuda")
                   for t in weights.values())
        engine = make_engine("transformers", EngineSpec(max_new_tokens=8, temperature=1.0, device="cuda",
                                                        dtype="bfloat16"), model=cuda_model, tokenizer=tokenizer)
        engine.update_weights(weights, 1)
        outputs.append(engine.generate(encode_problems(tokenizer, task.problems("train")[:4], 2)))
    assert torch.equal(outputs[0].completion_ids, outputs[1].completion_ids)
    assert torch.equal(outputs[0].behav_logp, outputs[1].behav_logp)
