"""A rollout worker on a GPU: it loads its reward models before its engine (an engine that sizes its
memory from what is free at its start, vLLM, then leaves them room); inside a Ray actor
``reward.model_device=cuda:N`` is the actor's own GPU; ``reward.model_dtype=auto`` is bfloat16 on
CUDA, float32 on the CPU; its start may take its engine's bound (vLLM on CUDA: longer)."""

from types import SimpleNamespace

import pytest

from asyncrl.config import Config
from asyncrl.core.loader import to_dict
from asyncrl.rewards.reward_model import model_dtype
from asyncrl.runtime import worker


@pytest.mark.parametrize("device, dtype, expected", [
    ("cuda", "auto", "bfloat16"), ("cuda:1", "auto", "bfloat16"), ("cpu", "auto", "float32"),
    ("cuda", "float32", "float32"), ("cpu", "float16", "float16")])
def test_auto_reward_model_dtype(device, dtype, expected):
    assert model_dtype(device, dtype) == expected


def test_inside_an_actor_a_reward_models_gpu_is_its_own():
    ray_backend = pytest.importorskip("asyncrl.runtime.ray.backend")
    cfg = Config()
    cfg.policy.device, cfg.reward.model_device = "cuda:1", "cuda:2"
    spec = worker.WorkerSpec(0, to_dict(cfg), "p", 0, 8, True)
    seen = ray_backend.visible_device(spec).config
    assert (seen["policy"]["device"], seen["reward"]["model_device"]) == ("cuda", "cuda")
    cpu_rewards = Config()
    cpu_rewards.policy.device = "cuda:1"
    kept = ray_backend.visible_device(worker.WorkerSpec(0, to_dict(cpu_rewards), "p", 0, 8, True)).config
    assert kept["reward"]["model_device"] == "cpu"


def test_a_worker_loads_its_rewards_before_its_engine(monkeypatch):
    order = []
    import asyncrl.policy.model as policy_model
    import asyncrl.runtime.engines as engines
    import asyncrl.tasks as tasks
    from asyncrl.rewards import RewardSet

    monkeypatch.setattr(policy_model, "load_policy", lambda *a, **k: (SimpleNamespace(eval=lambda: None), None))
    monkeypatch.setattr(worker, "worker_engine_kwargs", lambda cfg, staging=None: {})
    monkeypatch.setattr(tasks, "configured_task", lambda section, need_eval=True: None)
    monkeypatch.setattr(RewardSet, "from_config", staticmethod(lambda section, task=None: order.append("rewards")))

    def engine(*args, **kwargs):
        order.append("engine")
        raise RuntimeError("stop here")

    monkeypatch.setattr(engines, "rollout_engine", engine)
    spec = worker.WorkerSpec(0, to_dict(Config()), "p", 0, 8, True)
    with pytest.raises(RuntimeError, match="stop here"):
        worker.RolloutWorker(spec, channel=None)
    assert order == ["rewards", "engine"]


@pytest.mark.parametrize("engine, device, given, expected", [
    ("transformers", "cpu", 0.0, 300.0), ("vllm", "cpu", 0.0, 300.0),
    ("vllm", "cuda", 0.0, 1200.0),  # a 7B engine's start (memory profile, CUDA graphs) can pass 300 s
    ("vllm", "cuda", 90.0, 90.0),  # the user's own bound wins
])
def test_a_workers_start_bound_is_its_engines_unless_set(engine, device, given, expected):
    from asyncrl.runtime.backends import start_timeout_s

    cfg = Config()
    cfg.rollout.engine, cfg.policy.device, cfg.async_.worker_start_timeout_s = engine, device, given
    assert start_timeout_s(cfg) == expected


@pytest.mark.parametrize("device, refused", [("cuda:1", True), ("cuda:0", False), ("cuda", False)])
def test_vllm_on_another_gpu_than_the_first_visible_is_refused_in_one_line(device, refused):
    from asyncrl.runtime.validate import check_parts

    cfg = Config()
    cfg.rollout.engine, cfg.policy.device = "vllm", device
    if not refused:
        check_parts(cfg)
        return
    with pytest.raises(ValueError) as err:
        check_parts(cfg)
    assert str(err.value).startswith("policy.device: 'cuda:1' with rollout.engine=vllm")
    assert "CUDA_VISIBLE_DEVICES=1" in str(err.value) and "\n" not in str(err.value)
    cfg.rollout.engine = "transformers"  # generates with the module where it is: any index
    check_parts(cfg)


def test_vllm_in_ray_actors_beside_a_trainer_on_another_gpu_is_accepted():
    from asyncrl.runtime.validate import check_parts

    cfg = Config()
    cfg.rollout.engine, cfg.policy.device, cfg.run.mode, cfg.async_.backend = "vllm", "cuda:1", "async", "ray"
    check_parts(cfg)  # an actor is shown its own GPU as cuda
    cfg.async_.backend = "local"
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES=1"):
        check_parts(cfg)


def test_tf32_is_on_again_after_an_engine_that_reset_it(monkeypatch):
    """vLLM's set-up resets the TF32 switch; in sync mode its process is the trainer's, whose
    float32 matmuls on CUDA must keep TF32 (only the switch is read: no CUDA is needed)."""
    import torch

    import asyncrl.runtime.engines as engines

    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision

    def resetting_engine(*args, **kwargs):
        matmul.fp32_precision = "ieee"
        return "engine"

    monkeypatch.setattr(engines, "make_engine", resetting_engine)
    cfg = Config()
    cfg.policy.device = "cuda"
    try:
        assert engines.rollout_engine(cfg, model=None, tokenizer=None, policy_dir="p", seed=0, chunked=False) == "engine"
        # on again, through the legacy switch, which leaves torch's legacy getter (torch.compile
        # reads it) answering after a library used the newer API (a mix of the two only via the newer
        # one makes that getter raise)
        assert matmul.allow_tf32 and torch.get_float32_matmul_precision() == "high"
    finally:
        matmul.allow_tf32 = before == "tf32"
