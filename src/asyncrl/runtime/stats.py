"""Per-step runtime metrics that are not objective diagnostics: staleness and timing."""

from __future__ import annotations

import torch

from asyncrl.types import Batch


def staleness_metrics(batch: Batch, version: int) -> dict[str, float]:
    """Staleness V − v at consumption: over valid tokens (with its histogram), and per sequence by
    its oldest token."""
    mask = batch.completion_mask
    if not mask.any():
        return {}
    token = (version - batch.versions[mask]).float()
    big = torch.iinfo(torch.long).max
    oldest = torch.where(mask, batch.versions, torch.full_like(batch.versions, big)).min(dim=1).values
    newest = torch.where(mask, batch.versions, torch.full_like(batch.versions, -1)).max(dim=1).values
    has_tokens = mask.any(dim=1)
    seq = (version - oldest[has_tokens]).float()
    multi = (has_tokens & (newest != oldest)).float()
    return {
        "staleness_token_min": token.min().item(), "staleness_token_mean": token.mean().item(),
        "staleness_token_max": token.max().item(), "staleness_seq_min": seq.min().item(),
        "staleness_seq_mean": seq.mean().item(), "staleness_seq_max": seq.max().item(),
        "multi_version_seq_frac": multi.mean().item(),
        # tokens per lag 0, 1, 2, ...: the whole distribution, not only its mean and max
        "staleness_token_hist": torch.bincount(token.long().clamp(min=0)).tolist(),
    }
