"""Properties every loss in LOSSES must have; a newly registered loss is covered automatically."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncrl.objectives import AGG_MODES, COMMON_STATS, LOSSES, policy_loss

from .helpers import (BATCH_LEVEL, NON_FIRING, REGULARIZER_OFF, all_loss_names, default_params, make_batch,
                      needs_prox, rows, run)

NAMES = all_loss_names()
FAST = settings(max_examples=30, deadline=None)

seeds = st.integers(0, 2**31 - 1)
sizes_b = st.integers(1, 6)
sizes_t = st.integers(1, 7)


def test_registry_has_every_required_loss():
    required = {"ppo", "decoupled", "tis", "mis", "cispo", "opsm", "m2po", "gspo", "vaco", "reinforce"}
    assert required <= set(LOSSES)


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=sizes_b, t=sizes_t, with_prox=st.booleans(), token_adv=st.booleans())
def test_zero_advantage_gives_zero_gradient(name, seed, b, t, with_prox, token_adv):
    batch = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name), token_adv=token_adv)
    batch["advantages"] = torch.zeros_like(batch["advantages"])
    loss, _, grad = run(name, batch, **REGULARIZER_OFF.get(name, {}))
    assert torch.isfinite(loss)
    assert torch.equal(grad, torch.zeros_like(grad))


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=sizes_b, t=sizes_t, with_prox=st.booleans(), token_adv=st.booleans(),
       agg=st.sampled_from(AGG_MODES), garbage=st.sampled_from([float("nan"), float("-inf"), float("inf")]))
def test_masked_positions_change_nothing(name, seed, b, t, with_prox, token_adv, agg, garbage):
    clean = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name), token_adv=token_adv)
    dirty = rows(clean, slice(None))
    off = ~clean["loss_mask"]
    for key in ("behav_logp", "prox_logp"):
        if dirty[key] is not None:
            dirty[key] = dirty[key].masked_fill(off, garbage)
    dirty["logp"] = dirty["logp"].detach().masked_fill(off, garbage).requires_grad_()
    if token_adv:
        dirty["advantages"] = dirty["advantages"].masked_fill(off, garbage)
    dirty["versions"] = dirty["versions"].masked_fill(off, 10**6)
    loss_c, stats_c, grad_c = run(name, clean, agg=agg)
    loss_d, stats_d, grad_d = run(name, dirty, agg=agg)
    torch.testing.assert_close(loss_d, loss_c, rtol=0, atol=0)
    torch.testing.assert_close(grad_d, grad_c, rtol=0, atol=0)
    assert torch.equal(grad_d[off], torch.zeros_like(grad_d[off]))
    for key in COMMON_STATS:
        torch.testing.assert_close(stats_d[key], stats_c[key], equal_nan=True)


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=st.integers(2, 6), t=sizes_t, with_prox=st.booleans(), agg=st.sampled_from(AGG_MODES))
def test_batch_permutation_changes_nothing(name, seed, b, t, with_prox, agg):
    batch = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name))
    perm = torch.randperm(b, generator=torch.Generator().manual_seed(seed))
    loss, stats, grad = run(name, batch, agg=agg)
    loss_p, stats_p, grad_p = run(name, rows(batch, perm), agg=agg)
    torch.testing.assert_close(loss_p, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(grad_p, grad[perm], rtol=1e-5, atol=1e-7)
    for key in ("n_valid_tokens", "clipped_tokens", "masked_token_frac", "ratio_mean", "ess_frac"):
        torch.testing.assert_close(stats_p[key], stats[key], rtol=1e-5, atol=1e-6, equal_nan=True)


def _split_rows(b: int, seed: int) -> list[torch.Tensor]:
    perm = torch.randperm(b, generator=torch.Generator().manual_seed(seed + 1))
    n_chunks = 1 + seed % min(3, b)
    return [c for c in torch.tensor_split(perm, n_chunks) if c.numel()]


def test_a_loss_is_declared_micro_batch_exact_unless_it_decides_on_the_whole_call():
    """The registry's flag (what config and several ranks allow) says what the property below checks:
    every loss but the whole-call ones splits exactly, so none is refused micro-batches for nothing."""
    from asyncrl.objectives.registry import micro_batch_exact_losses

    assert set(micro_batch_exact_losses()) == set(NAMES) - BATCH_LEVEL


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=st.integers(2, 7), t=sizes_t, with_prox=st.booleans(), token_adv=st.booleans(),
       agg=st.sampled_from(AGG_MODES))
def test_micro_batches_with_global_denominators_equal_whole_batch(name, seed, b, t, with_prox, token_adv, agg):
    """Holds for every loss whose decisions are per token or per sequence. m2po / vaco decide on a
    whole-call statistic (documented); for them it holds when their filter cannot fire."""
    params = {"agg": agg, **(NON_FIRING.get(name, {}) if name in BATCH_LEVEL else {})}
    batch = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name), token_adv=token_adv)
    loss, _, grad = run(name, batch, **params)
    global_counts = {
        "global_num_tokens": batch["loss_mask"].sum(),
        "global_num_seqs": int(batch["loss_mask"].any(-1).sum()),
    }
    total_loss = torch.zeros(())
    total_grad = torch.zeros_like(grad)
    for idx in _split_rows(b, seed):
        loss_m, _, grad_m = run(name, rows(batch, idx), **params, **global_counts)
        total_loss = total_loss + loss_m
        total_grad[idx] += grad_m
    torch.testing.assert_close(total_loss, loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(total_grad, grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=sizes_b, t=sizes_t, with_prox=st.booleans(), sign=st.sampled_from([-1.0, 1.0]))
def test_finite_at_extreme_log_ratios(name, seed, b, t, with_prox, sign):
    batch = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name))
    g = torch.Generator().manual_seed(seed)
    flips = torch.where(torch.rand(b, t, generator=g) < 0.5, sign, -sign)
    batch["behav_logp"] = batch["logp"].detach() + 50.0 * flips
    if batch["prox_logp"] is not None:
        batch["prox_logp"] = batch["logp"].detach() - 50.0 * flips
    loss, stats, grad = run(name, batch)
    assert torch.isfinite(loss)
    assert torch.isfinite(grad).all()
    assert torch.isfinite(stats["importance_weight_max"]) or not batch["loss_mask"].any()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("agg", AGG_MODES)
def test_all_masked_batch_gives_zero_loss_and_zero_gradient(name, agg):
    batch = make_batch(3, 3, 4)
    batch["loss_mask"] = torch.zeros(3, 4, dtype=torch.bool)
    batch["behav_logp"][0, 0] = float("nan")  # garbage under the mask
    loss, stats, grad = run(name, batch, agg=agg)
    assert loss.item() == 0.0
    assert loss.requires_grad
    assert torch.equal(grad, torch.zeros_like(grad))
    assert stats["n_valid_tokens"].item() == 0
    assert math.isnan(stats["ratio_mean"].item()) and math.isnan(stats["importance_weight_max"].item())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_prox", [False, True])
def test_stats_contract(name, with_prox):
    loss, stats, _ = run(name, make_batch(0, 4, 5, with_prox=with_prox or needs_prox(name)))
    assert loss.dim() == 0 and loss.dtype == torch.float32
    assert set(COMMON_STATS) <= set(stats)
    for key, value in stats.items():
        assert isinstance(value, torch.Tensor), key
        assert value.dim() == 0 and not value.requires_grad and value.is_floating_point(), key
    assert {"staleness_mean", "staleness_max", "future_version_tokens"} <= set(stats)


@pytest.mark.parametrize("name", NAMES)
@FAST
@given(seed=seeds, b=sizes_b, t=sizes_t, with_prox=st.booleans(), agg=st.sampled_from(AGG_MODES))
def test_on_policy_gradient_equals_vanilla_policy_gradient(name, seed, b, t, with_prox, agg):
    """π_θ = π_behav = π_prox: every correction is inactive and the gradient is REINFORCE's."""
    batch = make_batch(seed, b, t, with_prox=with_prox or needs_prox(name))
    batch["behav_logp"] = batch["logp"].detach().clone()
    if batch["prox_logp"] is not None:
        batch["prox_logp"] = batch["logp"].detach().clone()
    _, _, grad = run(name, batch, agg=agg)
    _, _, grad_ref = run("reinforce", batch, agg=agg)
    torch.testing.assert_close(grad, grad_ref, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter_is_named(name):
    batch = make_batch(0, 2, 3)
    with pytest.raises(ValueError, match="not_a_param"):
        run(name, batch, not_a_param=1.0)
    with pytest.raises(ValueError, match="agg"):
        run(name, batch, agg="token-mean")


@pytest.mark.parametrize("name", NAMES)
def test_bf16_inputs_are_upcast(name):
    batch = make_batch(1, 3, 4)
    loss32, _, _ = run(name, batch)
    b16 = rows(batch, slice(None))
    for key in ("behav_logp", "prox_logp"):
        b16[key] = batch[key].to(torch.bfloat16)
    b16["logp"] = batch["logp"].detach().to(torch.bfloat16).requires_grad_()
    loss16, _, grad16 = run(name, b16)
    assert loss16.dtype == torch.float32 and grad16.dtype == torch.bfloat16
    assert torch.isfinite(loss16)


def test_policy_loss_matches_registry_function():
    batch = make_batch(5, 3, 4)
    for name in NAMES:
        params = default_params(name)
        args = dict(prox_logp=batch["prox_logp"], **params)
        a, _ = policy_loss(name, batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"], **args)
        b, _ = LOSSES[name](batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"], **args)
        assert torch.equal(a, b)
