"""trainer.kl_coef: hand-worked KL estimators, no effect at 0, a pull toward the frozen reference
at > 0, a reference that never trains, and the LoRA reference (adapters off)."""

import copy
import math

import pytest
import torch

from asyncrl.config import LossConfig, PolicyConfig, TrainerConfig, load_config
from asyncrl.training.reference import ReferencePolicy, build_reference, kl_estimate, kl_penalty
from asyncrl.training.trainer import Learner


def test_estimators_by_hand():
    logp = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.2]]))
    log_r = math.log(0.5)  # log π_ref/π_θ of the first token; the second has r = 1
    assert kl_estimate(logp, ref, "k1")[0].tolist() == pytest.approx([-log_r, 0.0])
    assert kl_estimate(logp, ref, "k2")[0].tolist() == pytest.approx([0.5 * log_r ** 2, 0.0])
    assert kl_estimate(logp, ref, "k3")[0].tolist() == pytest.approx([(0.5 - 1) - log_r, 0.0])  # 0.1931...
    assert kl_estimate(logp, ref, "k3")[0, 0].item() == pytest.approx(0.193147, abs=1e-6)
    mask = torch.tensor([[True, False]])
    assert kl_penalty(logp, ref, mask, "k1").item() == pytest.approx(-log_r)  # only the masked-in token
    assert kl_penalty(logp, ref, torch.tensor([[True, True]]), "k1").item() == pytest.approx(-log_r / 2)
    assert kl_penalty(logp, ref, torch.zeros_like(mask), "k3").item() == 0.0  # no token: no penalty, no NaN


def test_k1_k3_are_unbiased_on_samples_from_the_policy():
    """E_{x~π_θ}[k1] = E[k3] = KL(π_θ‖π_ref), checked exactly on a 3-outcome distribution."""
    p, q = torch.tensor([0.6, 0.3, 0.1]), torch.tensor([0.2, 0.5, 0.3])
    kl = (p * (p / q).log()).sum()
    for name in ("k1", "k3"):
        per_outcome = kl_estimate(p.log()[None], q.log()[None], name)[0]
        assert (p * per_outcome).sum().item() == pytest.approx(kl.item(), rel=1e-5)


def test_kl_estimate_keeps_the_gradient():
    logp = torch.log(torch.tensor([[0.5]])).requires_grad_()
    kl_penalty(logp, torch.log(torch.tensor([[0.25]])), torch.tensor([[True]]), "k3").backward()
    assert logp.grad.item() == pytest.approx(1 - 0.5)  # d/dℓ [(r − 1) − log r], r = e^{ℓ_ref − ℓ}: 1 − r


def train(model, batch, steps, reference=None, **cfg):
    """Weights after ``steps`` steps, the step stats, and the mean k3 KL of the trained policy to the
    starting one on the batch's tokens; ``model`` is left as it started."""
    start = {k: v.clone() for k, v in model.state_dict().items()}
    trainer = Learner(model, TrainerConfig(n_minibatches=2, lr=3e-3, **cfg), LossConfig(), reference=reference)
    stats = [trainer.step(batch) for _ in range(steps)]
    after = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        logp = trainer.logprobs(batch)[0]
        model.load_state_dict(start)
        start_logp = trainer.logprobs(batch)[0]
    return after, stats, kl_penalty(logp, start_logp, batch.completion_mask).item()


def test_zero_coef_is_bitwise_the_plain_trainer(policy_and_batch):
    model, batch = policy_and_batch
    assert build_reference(load_config(None, []), model, "unused") is None  # nothing is loaded
    plain, stats, _ = train(model, batch, 2)
    assert "kl_ref" not in stats[0]
    again, _, _ = train(model, batch, 2, reference=ReferencePolicy(copy.deepcopy(model)), kl_coef=0.0)
    assert all(torch.equal(plain[k], again[k]) for k in plain)


def test_penalty_pulls_toward_the_frozen_reference(policy_and_batch):
    model, batch = policy_and_batch
    start = {k: v.clone() for k, v in model.state_dict().items()}
    reference = ReferencePolicy(copy.deepcopy(model))
    _, _, free_kl = train(model, batch, 6)
    _, held_stats, held_kl = train(model, batch, 6, reference=reference, kl_coef=20.0)
    assert held_kl < 0.1 * free_kl, (held_kl, free_kl)
    assert all(math.isfinite(s["kl_ref"]) and s["kl_ref"] >= 0 for s in held_stats)  # k3 >= 0
    assert held_stats[0]["kl_ref"] < held_stats[-1]["kl_ref"]  # 0 at the start (two updates a step)
    # the reference never trains: its weights are the start's, and nothing asks for their gradient
    ref_state = reference.model.state_dict()
    assert all(torch.equal(ref_state[k], start[k]) for k in start)
    assert not any(p.requires_grad for p in reference.model.parameters())
    assert not any(p.grad is not None for p in reference.model.parameters())


def test_lora_reference_is_the_base_with_adapters_off(policy_and_batch):
    pytest.importorskip("peft")
    from asyncrl.policy.lora import apply_lora

    model, batch = policy_and_batch
    base = copy.deepcopy(model)
    lora = apply_lora(copy.deepcopy(model), PolicyConfig(lora_rank=4, lora_alpha=32.0))
    cfg = load_config(None, ["trainer.kl_coef=1.0", "policy.lora_rank=4"])
    reference = build_reference(cfg, lora, "unused")  # no load: the trained module itself, adapters off
    assert reference.adapters_off
    trainer = Learner(lora, TrainerConfig(n_minibatches=2, lr=1e-2, kl_coef=1.0), LossConfig(), reference=reference)
    for _ in range(2):
        stats = trainer.step(batch)
    with torch.no_grad():
        policy_logp = trainer.logprobs(batch)[0]
        base_logp = Learner(base, TrainerConfig(), LossConfig()).logprobs(batch)[0]
    ref_logp = reference.logprobs(batch, temperature=1.0, autocast=trainer._autocast())
    assert not torch.allclose(policy_logp, base_logp)  # the adapters trained
    torch.testing.assert_close(ref_logp, base_logp)
    assert stats["kl_ref"] > 0
