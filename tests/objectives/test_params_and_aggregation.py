"""Parameter validation, introspection for the config layer, and aggregation modes by hand."""

from __future__ import annotations

import pytest
import torch

from asyncrl.objectives import LOSS_PARAMS, LOSSES, REQUIRED, loss_param_names, policy_loss, validate_loss_params

from .helpers import call, from_ratios, make_batch, run, t


def test_contract_parameter_names_and_defaults():
    expected = {
        "ppo": {"eps_low": 0.2, "eps_high": None, "dual_clip": None},
        "decoupled": {"eps_low": 0.2, "behav_cap": None, "behav_cap_mode": "mask"},
        "tis": {"cap": 2.0, "level": "token", "eps_low": 0.2},
        "mis": {"low": 0.5, "high": 5.0, "level": "token"},
        "cispo": {"cap_high": 5.0, "cap_low": None},
        "opsm": {"delta": REQUIRED, "eps_low": 0.2},
        "m2po": {"tau": 0.04, "variant": "paper"},
        "gspo": {"eps_low": 3e-4, "eps_high": 4e-4, "token_level": False},
        "vaco": {"delta": 0.05},
        "reinforce": {},
    }
    for name, params in expected.items():
        names = loss_param_names(name)
        assert names == LOSS_PARAMS[name]
        assert names["agg"] == "token_mean" and names["keep_filtered_in_denominator"] is True
        assert "global_num_tokens" not in names  # per-call, not config
        for key, default in params.items():
            assert names[key] == default, (name, key)


@pytest.mark.parametrize(
    "name, params, bad",
    [
        ("ppo", {"eps_low": 1.5}, "eps_low"),
        ("ppo", {"eps_low": True}, "eps_low"),
        ("ppo", {"eps_high": -0.1}, "eps_high"),
        ("ppo", {"dual_clip": 0.5}, "dual_clip"),
        ("ppo", {"agg": "seq-mean-token-mean"}, "agg"),
        ("ppo", {"norm_const": 0}, "norm_const"),
        ("ppo", {"global_num_tokens": -1}, "global_num_tokens"),
        ("ppo", {"keep_filtered_in_denominator": 1}, "keep_filtered_in_denominator"),
        ("decoupled", {"behav_cap": 0.5}, "behav_cap"),
        ("decoupled", {"behav_cap_mode": "truncate"}, "behav_cap_mode"),
        ("tis", {"level": "geometric"}, "level"),
        ("tis", {"cap": float("inf")}, "cap"),
        ("mis", {"low": 1.5}, "low"),
        ("mis", {"high": 0.9}, "high"),
        ("cispo", {"cap_high": "5"}, "cap_high"),
        ("opsm", {}, "delta"),
        ("opsm", {"delta": -1.0}, "delta"),
        ("m2po", {"variant": "both"}, "variant"),
        ("m2po", {"tau": 0.0}, "tau"),
        ("gspo", {"token_level": "yes"}, "token_level"),
        ("vaco", {"delta": None}, "delta"),
        ("reinforce", {"eps_low": 0.2}, "eps_low"),
    ],
)
def test_invalid_params_raise_naming_the_param(name, params, bad):
    with pytest.raises(ValueError, match=bad):
        validate_loss_params(name, params)
    batch = make_batch(0, 2, 3)
    with pytest.raises(ValueError, match=bad):
        policy_loss(name, batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"], **params)


def test_unknown_loss_and_several_unknown_params():
    with pytest.raises(ValueError, match="nope"):
        loss_param_names("nope")
    batch = make_batch(0, 2, 3)
    with pytest.raises(ValueError, match="nope"):
        policy_loss("nope", batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"])
    with pytest.raises(ValueError, match="alpha.*beta"):
        validate_loss_params("ppo", {"beta": 1, "alpha": 2})


def test_bad_tensor_shapes_raise():
    batch = make_batch(0, 2, 3)
    with pytest.raises(ValueError, match="advantages"):
        policy_loss("ppo", batch["logp"], batch["behav_logp"], torch.zeros(3), batch["loss_mask"])
    with pytest.raises(ValueError, match="loss_mask"):
        policy_loss("ppo", batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"][:, :2])
    with pytest.raises(ValueError, match="prox_logp"):
        policy_loss("ppo", batch["logp"], batch["behav_logp"], batch["advantages"], batch["loss_mask"],
                    prox_logp=torch.zeros(2, 2))


def test_every_loss_accepts_its_own_defaults():
    for name in LOSSES:
        params = {k: v for k, v in loss_param_names(name).items() if v is not REQUIRED}
        loss, _, grad = run(name, make_batch(0, 2, 3), **params)
        assert torch.isfinite(loss) and torch.isfinite(grad).all(), name


def test_aggregation_modes_by_hand():
    # REINFORCE per-token objective J = A ℓ with ℓ = [[-1, -2, -3], [-4, pad, pad]], A = [1, 1].
    logp = t([[-1.0, -2.0, -3.0], [-4.0, 0.0, 0.0]]).requires_grad_()
    mask = torch.tensor([[True, True, True], [True, False, False]])
    adv = t([1.0, 1.0])
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask)
    assert loss.item() == pytest.approx(10 / 4)
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask, agg="seq_mean_token_mean")
    assert loss.item() == pytest.approx((6 / 3 + 4 / 1) / 2)
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask, agg="seq_mean_token_sum_norm")
    assert loss.item() == pytest.approx(10 / (2 * 3))  # B' = 2, norm_const = padded T = 3
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask, agg="seq_mean_token_sum_norm", norm_const=5)
    assert loss.item() == pytest.approx(10 / (2 * 5))
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask, global_num_tokens=8)
    assert loss.item() == pytest.approx(10 / 8)
    loss, _, _ = call("reinforce", logp, logp.detach(), adv, mask, agg="seq_mean_token_mean",
                      global_num_seqs=torch.tensor(4))
    assert loss.item() == pytest.approx((2 + 4) / 4)


def test_filtered_sequence_denominators():
    # MIS sequence level rejects row1 (S = 9 > 5). Pre-filter count keeps it in B'; the flag drops it.
    logp, behav = from_ratios([[2.0, 2.0], [3.0, 3.0]])
    adv = t([1.0, 1.0])
    loss, _, _ = call("mis", logp, behav, adv, level="sequence", agg="seq_mean_token_mean")
    ref = 4.0 * logp.detach()[0].mean().item()  # weight 4 (S = 4 in band), REINFORCE bypass form
    assert loss.item() == pytest.approx(-ref / 2, rel=1e-6)
    loss_k, _, _ = call("mis", logp, behav, adv, level="sequence", agg="seq_mean_token_mean",
                        keep_filtered_in_denominator=False)
    assert loss_k.item() == pytest.approx(-ref, rel=1e-6)


def test_nonfinite_tokens_are_dropped_and_counted():
    logp, behav = from_ratios([[1.0, 1.0, 1.0]])
    behav = behav.clone()
    behav[0, 1] = float("nan")
    adv = t([[1.0, 1.0, float("inf")]])
    loss, stats, grad = call("ppo", logp, behav, adv)
    assert stats["nonfinite_tokens"].item() == 2 and stats["n_valid_tokens"].item() == 1
    assert loss.item() == pytest.approx(-1 / 3)  # the dropped tokens stay in the denominator
    torch.testing.assert_close(grad, t([[-1 / 3, 0.0, 0.0]]))
