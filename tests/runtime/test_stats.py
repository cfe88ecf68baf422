import torch

from asyncrl.runtime.stats import staleness_metrics
from asyncrl.types import Batch


def test_staleness_metrics_by_hand():
    # current version 5; row 0 spans versions 3 and 4 (interrupted), row 1 is all v4,
    # row 2 is all v2, row 3 has no generated token (excluded from sequence stats)
    versions = torch.tensor([[3, 3, 4], [4, 4, -1], [2, -1, -1], [-1, -1, -1]])
    mask = versions >= 0
    n = versions.shape[0]
    batch = Batch(prompt_ids=torch.zeros(n, 1, dtype=torch.long), prompt_mask=torch.ones(n, 1, dtype=torch.bool),
                  completion_ids=torch.zeros(n, 3, dtype=torch.long), behav_logp=torch.zeros(n, 3),
                  versions=versions, completion_mask=mask, rewards=torch.zeros(n),
                  group_ids=torch.zeros(n, dtype=torch.long), advantages=torch.zeros(n))
    m = staleness_metrics(batch, 5)
    # tokens: staleness 2, 2, 1, 1, 1, 3
    assert (m["staleness_token_min"], m["staleness_token_max"]) == (1, 3)
    assert abs(m["staleness_token_mean"] - 10 / 6) < 1e-6
    # sequences by oldest token: 2, 1, 3
    assert (m["staleness_seq_min"], m["staleness_seq_mean"], m["staleness_seq_max"]) == (1, 2, 3)
    assert m["multi_version_seq_frac"] == 0.25
