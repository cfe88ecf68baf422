"""Advantage estimators: group baselines by hand, GAE and V-trace against plain-loop references."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.objectives import gae, group_advantages, masked_whiten, vtrace

from .helpers import t

FAST = settings(max_examples=50, deadline=None)


def test_group_advantages_by_hand():
    # Group 7: [1, 0, 0, 1] (interleaved with others), group 3: [2, 2], group 9: singleton [5].
    rewards = t([1.0, 2.0, 0.0, 5.0, 0.0, 2.0, 1.0])
    groups = torch.tensor([7, 3, 7, 9, 7, 3, 7])
    std = math.sqrt((4 * 0.25) / 3)  # Bessel-corrected std of [1, 0, 0, 1]
    a = 0.5 / (std + 1e-6)
    torch.testing.assert_close(group_advantages(rewards, groups), t([a, 0.0, -a, 0.0, -a, 0.0, a]))
    torch.testing.assert_close(group_advantages(rewards, groups, "drgrpo"), t([0.5, 0, -0.5, 0, -0.5, 0, 0.5]))
    # RLOO: 1 − mean(others) = 1 − 1/3; 0 − 2/3
    r = 2 / 3
    torch.testing.assert_close(group_advantages(rewards, groups, "rloo"), t([r, 0, -r, 0, -r, 0, r]))


def test_group_advantages_validation():
    with pytest.raises(ValueError, match="method"):
        group_advantages(t([1.0]), torch.tensor([0]), "ppo")
    with pytest.raises(ValueError, match="group_ids"):
        group_advantages(t([1.0, 2.0]), torch.tensor([0]))


@FAST
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 12), method=st.sampled_from(["grpo", "drgrpo", "rloo"]))
def test_group_advantages_match_loop_reference(seed, n, method):
    g = torch.Generator().manual_seed(seed)
    rewards = torch.randn(n, generator=g)
    groups = torch.randint(0, 4, (n,), generator=g)
    expected = []
    for i in range(n):
        members = [rewards[j].item() for j in range(n) if groups[j] == groups[i]]
        k = len(members)
        if k == 1:
            expected.append(0.0)
            continue
        mean = sum(members) / k
        if method == "grpo":
            std = math.sqrt(sum((x - mean) ** 2 for x in members) / (k - 1))
            expected.append((rewards[i].item() - mean) / (std + 1e-6))
        elif method == "drgrpo":
            expected.append(rewards[i].item() - mean)
        else:
            expected.append(rewards[i].item() - (sum(members) - rewards[i].item()) / (k - 1))
    torch.testing.assert_close(group_advantages(rewards, groups, method), t(expected), rtol=1e-5, atol=1e-5)


def test_gae_by_hand():
    # γ = λ = 1: Â_t = (return-to-go) − V_t. rewards [0, 0, 1], values [.5, .2, .1]
    adv, ret = gae(t([[0.0, 0.0, 1.0]]), t([[0.5, 0.2, 0.1]]), torch.ones(1, 3, dtype=torch.bool))
    torch.testing.assert_close(adv, t([[0.5, 0.8, 0.9]]))
    torch.testing.assert_close(ret, t([[1.0, 1.0, 1.0]]))
    # γ = 0.5, λ = 0.5: δ = [0 + .5·.2 − .5, 0 + .5·.1 − .2, 1 − .1] = [−.4, −.15, .9]
    adv2, _ = gae(t([[0.0, 0.0, 1.0]]), t([[0.5, 0.2, 0.1]]), torch.ones(1, 3, dtype=torch.bool), 0.5, 0.5)
    a2 = 0.9
    a1 = -0.15 + 0.25 * a2
    a0 = -0.4 + 0.25 * a1
    torch.testing.assert_close(adv2, t([[a0, a1, a2]]))


def _compressed(row_mask: torch.Tensor) -> list[int]:
    return [i for i in range(row_mask.numel()) if row_mask[i]]


def _gae_reference(r, v, m, gamma, lam, boot):
    out = torch.zeros_like(r)
    for b in range(r.shape[0]):
        idx = _compressed(m[b])
        vals = [v[b, i].item() for i in idx] + [boot[b].item()]
        deltas = [r[b, i].item() + gamma * vals[k + 1] - vals[k] for k, i in enumerate(idx)]
        for k, i in enumerate(idx):
            out[b, i] = sum((gamma * lam) ** l * deltas[k + l] for l in range(len(idx) - k))
    return out


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 4), t_=st.integers(1, 8),
       gamma=st.sampled_from([1.0, 0.99, 0.5]), lam=st.sampled_from([1.0, 0.95, 0.0]))
def test_gae_matches_sum_form_reference(seed, b, t_, gamma, lam):
    g = torch.Generator().manual_seed(seed)
    r, v = torch.randn(b, t_, generator=g), torch.randn(b, t_, generator=g)
    m = torch.rand(b, t_, generator=g) < 0.7
    boot = torch.randn(b, generator=g)
    adv, ret = gae(r, v, m, gamma, lam, bootstrap_value=boot)
    ref = _gae_reference(r, v, m, gamma, lam, boot)
    torch.testing.assert_close(adv, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ret, torch.where(m, ref + v, 0.0), rtol=1e-4, atol=1e-5)


def _vtrace_reference(lb, lt, r, v, m, boot, gam, lam, rho_bar, c_bar, pg_bar):
    vs = torch.zeros_like(r)
    pg = torch.zeros_like(r)
    for b in range(r.shape[0]):
        idx = _compressed(m[b])
        n = len(idx)
        ratio = [math.exp(lt[b, i].item() - lb[b, i].item()) for i in idx]
        gs = [gam[b, i].item() for i in idx]
        vals = [v[b, i].item() for i in idx] + [boot[b].item()]
        rew = [r[b, i].item() for i in idx]
        delta = [min(rho_bar, ratio[k]) * (rew[k] + gs[k] * vals[k + 1] - vals[k]) for k in range(n)]
        targets = []
        for s in range(n):
            total, coef = vals[s], 1.0
            for k in range(s, n):
                total += coef * delta[k]
                coef *= gs[k] * lam * min(c_bar, ratio[k])
            targets.append(total)
        targets.append(boot[b].item())
        for k, i in enumerate(idx):
            vs[b, i] = targets[k]
            pg[b, i] = min(pg_bar, ratio[k]) * (rew[k] + gs[k] * targets[k + 1] - vals[k])
    return vs, pg


@FAST
@given(seed=st.integers(0, 2**31 - 1), b=st.integers(1, 3), t_=st.integers(1, 7), lam=st.sampled_from([1.0, 0.9]),
       bars=st.sampled_from([(1.0, 1.0, 1.0), (2.0, 1.0, 1.5), (1.0, 0.5, 1.0)]))
def test_vtrace_matches_sum_form_reference(seed, b, t_, lam, bars):
    g = torch.Generator().manual_seed(seed)
    lb = -2 * torch.rand(b, t_, generator=g)
    lt = lb + torch.randn(b, t_, generator=g)
    r, v = torch.randn(b, t_, generator=g), torch.randn(b, t_, generator=g)
    m = torch.rand(b, t_, generator=g) < 0.8
    gam = torch.where(torch.rand(b, t_, generator=g) < 0.2, 0.0, 0.9)  # some episode ends
    boot = torch.randn(b, generator=g)
    rho_bar, c_bar, pg_bar = bars
    out = vtrace(lb, lt, r, v, m, bootstrap_value=boot, gamma=gam, lam=lam, rho_bar=rho_bar, c_bar=c_bar,
                 rho_pg_bar=pg_bar)
    vs_ref, pg_ref = _vtrace_reference(lb, lt, r, v, m, boot, gam, lam, rho_bar, c_bar, pg_bar)
    torch.testing.assert_close(out.vs, vs_ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out.pg_advantages, pg_ref, rtol=1e-4, atol=1e-5)


def test_vtrace_on_policy_reduces_to_returns():
    """π = μ, λ = 1: v_s is the discounted return and A^pg = r + γ v_{t+1} − V (= GAE λ=1 shifted)."""
    g = torch.Generator().manual_seed(0)
    lp = -torch.rand(2, 5, generator=g)
    r, v = torch.randn(2, 5, generator=g), torch.randn(2, 5, generator=g)
    m = torch.ones(2, 5, dtype=torch.bool)
    out = vtrace(lp, lp, r, v, m, gamma=0.9)
    _, ret = gae(r, v, m, gamma=0.9, lam=1.0)
    torch.testing.assert_close(out.vs, ret)


def test_vtrace_requires_rho_bar_at_least_c_bar():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="c_bar"):
        vtrace(x, x, x, x, torch.ones(1, 2, dtype=torch.bool), rho_bar=1.0, c_bar=2.0)


def test_masked_whiten():
    x = t([[1.0, 2.0, 3.0, 100.0]])
    m = torch.tensor([[True, True, True, False]])
    out = masked_whiten(x, m)
    torch.testing.assert_close(out, t([[-1.0, 0.0, 1.0, 0.0]]), rtol=1e-5, atol=1e-5)
