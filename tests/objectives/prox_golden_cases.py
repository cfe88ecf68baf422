"""Fixed inputs and pairings of the proximal-policy golden test (test_prox_golden.py).

Each pairing is one loss × proximal strategy the benchmarks run: the atlas rows (each loss with its
natural proximal policy, plus importance-weighted REINFORCE and decoupled PPO with a recomputed
proximal policy), the a3po suite's sync arm (ppo against the behavior policy), the probability-space
mixture ``linear`` and the A-3PO variants (an α floor, an ESS-set floor, a truncated behavior weight,
sequence level). The inputs are one training batch of B = 8 sequences, T = 12 tokens, split into two
minibatches of 4 rows as ``Trainer.step`` splits it, at current version V = 16 with token versions
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
    """Row counts of the minibatches, as Trainer.step chunks its permutation."""
    return [len(index) for index in torch.arange(batch_size).chunk(N_MINIBATCHES)]


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-identical, with NaN equal to NaN (empty-set statistics are NaN)."""
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)) and torch.equal(a.isnan(), b.isnan())
