"""Fixed inputs and pairings of the proximal-policy golden test (test_prox_golden.py).

Each pairing is one loss × proximal strategy the benchmarks run: the atlas rows (each loss with its
natural proximal policy, plus importance-weighted REINFORCE and decoupled PPO with a recomputed
proximal policy), the a3po suite's sync arm (ppo against the behavior policy), the probability-space
mixture ``linear`` and the A-3PO variants (an α floor, an ESS-set floor, a truncated behavior weight,
sequence level). The inputs are one training batch of B = 8 sequences, T = 12 tokens, split into two
minibatches of 4 rows as ``Learner.step`` splits it, at current version V = 16 with token versions
giving every staleness 0..16, padded tails (version −1, outside the mask), and a ``recomputed`` tensor
standing in for the exact proximal log-probs of the extra forward pass.
"""

from __future__ import annotations

from pathlib import Path

import torch

GOLDEN_PATH = Path(__file__).parent / "data" / "prox_golden.pt"
CURRENT_VERSION = 16
N_MINIBATCHES = 2

# name: (loss.name, trainer.prox, loss.params)
PAIRINGS: dict[str, tuple[str, str, dict]] = {
    "ppo": ("ppo", "none", {}),
    "decoupled": ("decoupled", "loglinear", {}),
    "tis": ("tis", "none", {}),
    "mis": ("mis", "none", {}),
    "cispo": ("cispo", "none", {}),
    "opsm": ("opsm", "none", {"delta": 0.5}),
    "m2po": ("m2po", "none", {}),
    "gspo": ("gspo", "none", {}),
    "vaco": ("vaco", "none", {}),
    "reinforce": ("reinforce", "none", {}),
    "ppo_kl": ("ppo_kl", "none", {}),
    "spo": ("spo", "none", {}),
    "is_reinforce": ("tis", "none", {"cap": 1e9}),
    "recompute": ("decoupled", "recompute", {}),
    "a3po-sync": ("ppo", "behav", {}),
    "linear": ("decoupled", "linear", {}),
    # A-3PO variants that keep a trust region without a forward pass (docs/objectives.md)
    "a3po-floor": ("decoupled", "loglinear_floor", {}),
    # with a tight clip the floor changes which stale tokens are clipped on this batch (the default ε does not)
    "a3po-floor-eps0.01": ("decoupled", "loglinear_floor", {"eps_low": 0.01}),
    "a3po-ess": ("decoupled", "loglinear_ess", {}),  # this batch's ESS stays above 0.5: A-3PO's values
    "decoupled_bounded": ("decoupled_bounded", "loglinear", {}),
    "a3po_seq": ("a3po_seq", "loglinear", {}),
}


def build_inputs(seed: int = 24) -> dict[str, torch.Tensor]:
    """One seeded batch in minibatch order: behav_logp, logp, recomputed [B, T] float32; versions
    [B, T] int64; completion_mask [B, T] bool; advantages [B]; group_ids [B]."""
    g = torch.Generator().manual_seed(seed)
    b, t = 8, 12
    behav = -4.0 * torch.rand(b, t, generator=g) - 0.05
    # rows drift from π_behav by very different amounts: some inside every trust region, some far out
    spread = torch.tensor([0.02, 0.1, 0.3, 0.6, 1.0, 1.5, 2.5, 4.0])[:, None]
    logp = behav + spread * torch.randn(b, t, generator=g)
    recomputed = behav + 0.6 * (logp - behav) + 0.05 * torch.randn(b, t, generator=g)
    lengths = torch.tensor([12, 12, 9, 12, 5, 11, 12, 7])
    generated = torch.arange(t)[None, :] < lengths[:, None]
    # staleness d = V − v: every value 0..16 appears; tokens later in a sequence are never staler
    first = torch.tensor([16, 15, 13, 5, 3, 2, 1, 0])
    d = (first[:, None] - torch.arange(t)[None, :] * torch.tensor([2, 1, 1, 1, 1, 1, 0, 0])[:, None]).clamp(min=0)
    versions = torch.where(generated, CURRENT_VERSION - d, torch.full_like(d, -1))
    behav = torch.where(generated, behav, torch.zeros_like(behav))  # the engine records nothing there
    return {
        "behav_logp": behav,
        "logp": logp,
        "recomputed": recomputed,
        "versions": versions,
        "completion_mask": generated.clone(),
        "advantages": torch.tensor([1.2, -0.7, 0.4, -1.5, 0.9, -0.2, 2.0, -1.1]),
        "group_ids": torch.tensor([0, 0, 1, 1, 2, 2, 3, 3]),
    }


def minibatch_sizes(batch_size: int) -> list[int]:
    """Row counts of the minibatches, as Learner.step chunks its permutation."""
    return [len(index) for index in torch.arange(batch_size).chunk(N_MINIBATCHES)]


# float32's unit roundoff is u = 2**-24. A compared value is a short chain of float32 operations
# (log/exp, a clip, a product) and a reduction over at most B·T = 96 tokens; another CPU's
# vectorized kernels round exp/log differently and sum in another order, which moves a value by a
# few u relative to the largest term it was summed from. 64·u leaves an order of magnitude over
# what was seen between machines, and stays four orders under any change of the math: a clip
# bound moved by 1e-3 or an α rule changed moves these values by more than 1e-3 relative.
FLOAT32_TOLERANCE = 64 * 2.0 ** -24


def _scale(want: torch.Tensor) -> torch.Tensor:
    """The magnitude each element is judged against: the largest finite |value| of its column for a
    [minibatches, stats] statistics table (stats differ in scale by orders of magnitude), of the
    whole tensor otherwise (a gradient's elements are terms of the same sums)."""
    finite = torch.where(torch.isfinite(want), want.abs(), torch.zeros_like(want)).double()
    if want.dim() == 2 and want.shape[0] == N_MINIBATCHES:
        return finite.amax(dim=0, keepdim=True).expand_as(finite)
    return finite.amax().expand_as(finite) if finite.numel() else finite


def close(got: torch.Tensor, want: torch.Tensor) -> tuple[bool, str]:
    """(agree, why not): same shape and dtype, the same NaN/inf pattern, and every finite element
    within FLOAT32_TOLERANCE × (|want| + its scale) of the golden value (or a subnormal of zero)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False, f"{got.dtype}{tuple(got.shape)} vs {want.dtype}{tuple(want.shape)}"
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)) or not torch.equal(got[~finite].nan_to_num(),
                                                                        want[~finite].nan_to_num()):
        return False, "NaN/inf in other places"
    err = (got.double() - want.double()).abs()
    # + the smallest normal float32: an all-zero column (no clipped token) has no scale of its own
    bound = FLOAT32_TOLERANCE * (want.double().abs() + _scale(want)) + torch.finfo(torch.float32).tiny
    excess = torch.where(finite, err / bound, torch.zeros_like(err))
    if excess.numel() and excess.max() > 1:
        i = int(excess.argmax())
        return False, (f"element {i}: {got.flatten()[i].item():.9g} vs {want.flatten()[i].item():.9g} "
                       f"({excess.max().item():.3g}× the float32 tolerance)")
    return True, ""
