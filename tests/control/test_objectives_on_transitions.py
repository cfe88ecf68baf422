"""The objectives registry serves a batch of MuJoCo-style transitions ([N, 1] "tokens", all-ones mask)
exactly as it serves an LLM token batch, and the advantage helpers handle episode boundaries."""

import pytest
import torch

from benchmarks.control import ARMS, make_config, train
from asyncrl.objectives import gae, policy_loss, vtrace


def test_ppo_on_transitions_is_cleanrls_clipped_loss():
    g = torch.Generator().manual_seed(0)
    behav = -torch.rand(64, generator=g)
    logp = (behav + 0.3 * torch.randn(64, generator=g)).requires_grad_()
    adv = torch.randn(64, generator=g)
    ones = torch.ones(64, 1, dtype=torch.bool)
    loss, stats = policy_loss("ppo", logp[:, None], behav[:, None], adv[:, None], ones, eps_low=0.2)
    ratio = torch.exp(logp - behav)
    cleanrl = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()  # CleanRL's pg_loss
    torch.testing.assert_close(loss, cleanrl)
    (grad,) = torch.autograd.grad(loss, logp)
    (grad_ref,) = torch.autograd.grad(cleanrl, logp)
    torch.testing.assert_close(grad, grad_ref)
    assert stats["n_valid_tokens"].item() == 64


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_every_arm_trains_through_the_registry(arm):
    pytest.importorskip("gymnasium")  # the `control` extra
    result = train(make_config("CartPole-v1", arm=arm, total_steps=1024, num_envs=4, num_steps=64,
                               buffer_capacity=2))
    last = result.history[-1]
    assert len(result.history) == 4 and last["env_steps"] == 1024
    for key in ("pg_loss", "value_loss", "entropy", "tv", "approx_kl"):
        assert torch.isfinite(torch.tensor(last[key])), key
    assert last["tv"] > 0  # stale actors: π_θ ≠ μ on the batch


def test_gae_with_per_step_discounts_splits_episodes():
    g = torch.Generator().manual_seed(1)
    r, v = torch.randn(1, 7, generator=g), torch.randn(1, 7, generator=g)
    boot = torch.randn(1, generator=g)
    mask = torch.ones(1, 7, dtype=torch.bool)
    discounts = torch.full((1, 7), 0.9)
    discounts[0, 2] = 0.0  # an episode ends with step 2
    adv, ret = gae(r, v, mask, gamma=discounts, lam=0.8, bootstrap_value=boot)
    first, _ = gae(r[:, :3], v[:, :3], mask[:, :3], gamma=0.9, lam=0.8)  # ended: bootstrap 0
    second, _ = gae(r[:, 3:], v[:, 3:], mask[:, 3:], gamma=0.9, lam=0.8, bootstrap_value=boot)
    torch.testing.assert_close(adv, torch.cat([first, second], dim=1))
    torch.testing.assert_close(ret, adv + v)


def test_on_policy_vtrace_with_lambda_is_gae():
    g = torch.Generator().manual_seed(2)
    r, v, lp = (torch.randn(3, 9, generator=g) for _ in range(3))
    boot = torch.randn(3, generator=g)
    mask = torch.ones(3, 9, dtype=torch.bool)
    discounts = 0.99 * (torch.rand(3, 9, generator=g) > 0.2).float()
    adv, ret = gae(r, v, mask, gamma=discounts, lam=0.95, bootstrap_value=boot)
    out = vtrace(lp, lp, r, v, mask, gamma=discounts, lam=0.95, bootstrap_value=boot)
    torch.testing.assert_close(out.vs, ret, rtol=1e-5, atol=1e-5)
