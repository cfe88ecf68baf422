"""A statistic named ``*_max`` / ``*_min`` is the maximum / minimum of one call (stats.py): so over a
batch split into two calls, the whole batch's value is the max / min of the halves' values, which is
how a caller combining minibatch updates reduces it. Checked for every loss, and against the tensors
themselves for A-3PO (decoupled with its log-linear proximal policy)."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.objectives import approximate_prox_logp, policy_loss
from asyncrl.objectives.numerics import LOG_RATIO_BOUND

from .helpers import all_loss_names, make_batch, rows, run


def _extrema(stats: dict) -> dict[str, float]:
    return {k: v.item() for k, v in stats.items() if k.endswith(("_max", "_min"))}


@pytest.mark.parametrize("name", all_loss_names())
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_extrema_of_a_split_batch_combine_by_max_and_min(name, seed):
    batch = make_batch(seed, 6, 7, spread=1.0, mask_p=0.8)
    batch["loss_mask"][:, 0] = True  # every row has a valid token: neither half is empty
    _, whole, _ = run(name, batch)
    _, first, _ = run(name, rows(batch, slice(0, 3)))
    _, second, _ = run(name, rows(batch, slice(3, 6)))
    extrema = _extrema(whole)
    assert {"ratio_max", "ratio_min", "importance_weight_max", "staleness_max"} <= set(extrema)
    for key, value in extrema.items():
        halves = [first[key].item(), second[key].item()]
        combined = max(halves) if key.endswith("_max") else min(halves)
        assert value == pytest.approx(combined, rel=1e-6), key


def test_a3po_extrema_are_those_of_the_tensors():
    batch = make_batch(3, 5, 9, spread=1.5, mask_p=0.7)
    versions = torch.randint(-1, 17, (5, 9), generator=torch.Generator().manual_seed(3))
    logp, behav, mask = batch["logp"], batch["behav_logp"], batch["loss_mask"]
    prox = approximate_prox_logp("loglinear", behav, logp.detach(), versions, 16)
    _, stats = policy_loss("decoupled", logp, behav, batch["advantages"], mask, prox_logp=prox,
                           versions=versions, current_version=16)

    def ratio(num, den):  # the stats' ratios come from log-ratios clamped to ±LOG_RATIO_BOUND
        return torch.exp((num.detach() - den).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND))[mask]

    staleness = (16 - versions)[mask & (versions >= 0)].float()
    want = {
        "ratio": ratio(logp, prox),  # r = π_θ/π_prox
        "importance_weight": ratio(logp, behav),  # ρ = π_θ/π_behav
        "behav_weight": ratio(prox, behav),  # w = π_prox/π_behav
        "staleness": staleness,
    }
    for prefix, values in want.items():
        assert stats[f"{prefix}_max"].item() == pytest.approx(values.max().item(), rel=1e-6), prefix
        assert stats[f"{prefix}_min"].item() == pytest.approx(values.min().item(), rel=1e-6), prefix
    assert not math.isnan(stats["staleness_max"].item())
