import pytest
import torch

from asyncrl.runtime.buffer import Group, StalenessBuffer, concat_groups
from asyncrl.types import Batch


def group(version_rows: list[list[int]], prompt_len: int = 2, gid: int = 0) -> Group:
    """A group whose row i has generated tokens with the given versions (−1 = padding)."""
    versions = torch.tensor(version_rows)
    n, t = versions.shape
    return Group(Batch(
        prompt_ids=torch.ones(n, prompt_len, dtype=torch.long), prompt_mask=torch.ones(n, prompt_len, dtype=torch.bool),
        completion_ids=torch.ones(n, t, dtype=torch.long), behav_logp=torch.zeros(n, t),
        versions=versions, completion_mask=versions >= 0, rewards=torch.zeros(n),
        group_ids=torch.full((n,), gid), advantages=torch.zeros(n)))


def test_admission_formula():
    # K = 1, B = 2 groups × 4 samples = 8 samples per batch
    buf = StalenessBuffer(1, groups_per_batch=2, samples_per_group=4)
    assert buf.capacity(0) == 16  # (K + V + 1) · B
    assert buf.try_admit(8, 0) and buf.try_admit(8, 0)
    assert not buf.try_admit(4, 0)
    assert buf.capacity(1) == 8 and buf.try_admit(8, 1)
    buf.mark_lost(8)  # a dead worker's unit frees its capacity
    assert buf.capacity(1) == 8 and buf.lost == 8


def test_k0_admits_exactly_one_batch_per_version():
    buf = StalenessBuffer(0, groups_per_batch=2, samples_per_group=4)
    assert buf.try_admit(8, 0) and not buf.try_admit(1, 0)
    assert buf.try_admit(8, 1) and not buf.try_admit(1, 1)


def test_drop_at_consumption_counts_and_frees_capacity():
    buf = StalenessBuffer(2, groups_per_batch=1, samples_per_group=2)
    assert buf.try_admit(2, 0) and buf.try_admit(2, 0)
    buf.add(group([[0, 0, -1], [0, 1, 1]]))  # oldest token v0
    buf.add(group([[3, 3, 3], [3, -1, -1]]))
    assert buf.ready(3)  # 3 − 0 = 3 > K = 2: first group dropped, second is fresh
    assert buf.dropped == 2 and buf.started == 2
    taken = buf.take(3)
    assert len(taken) == 1 and taken[0].oldest_version == 3


def test_staleness_exactly_k_is_kept():
    buf = StalenessBuffer(2, groups_per_batch=1, samples_per_group=1)
    buf.add(group([[1, 2]]))
    assert buf.ready(3) and buf.dropped == 0


def test_hard_sync_bound_zero():
    buf = StalenessBuffer(4, groups_per_batch=1, samples_per_group=1)
    buf.add(group([[4, 5]]))
    buf.add(group([[5, 5]]))
    assert buf.ready(5, bound=0)
    assert buf.dropped == 1 and buf.take(5, bound=0)[0].oldest_version == 5


def test_fifo_order():
    buf = StalenessBuffer(8, groups_per_batch=2, samples_per_group=1)
    for gid in range(3):
        buf.add(group([[gid]], gid=gid))
    assert [int(g.batch.group_ids[0]) for g in buf.take(2)] == [0, 1]


def test_recency_weighting_prefers_fresh_groups():
    counts = {0: 0, 4: 0}
    for seed in range(200):
        buf = StalenessBuffer(8, groups_per_batch=1, samples_per_group=1, recency_decay=0.3, seed=seed)
        buf.add(group([[0]], gid=0))
        buf.add(group([[4]], gid=4))
        counts[int(buf.take(4)[0].batch.group_ids[0])] += 1
    assert counts[4] > 150  # weight 1 vs 0.3^4 ≈ 0.008


def test_take_without_enough_raises():
    buf = StalenessBuffer(1, groups_per_batch=2, samples_per_group=1)
    buf.add(group([[0]]))
    with pytest.raises(RuntimeError):
        buf.take(0)


def test_concat_groups_repads():
    a = group([[0, 0]], prompt_len=2)
    b = group([[1, 1, 1, 1]], prompt_len=3)
    batch = concat_groups([a, b], pad_id=9)
    assert batch.prompt_ids.shape == (2, 3) and batch.completion_ids.shape == (2, 4)
    assert batch.prompt_ids[0, 0] == 9 and not batch.prompt_mask[0, 0]  # left pad
    assert batch.versions[0].tolist() == [0, 0, -1, -1] and not batch.completion_mask[0, 2:].any()


def test_concat_groups_stacks_in_group_order_whatever_the_arrival():
    """Groups taken in the order their environments answered stack as sync stacks them."""
    a, b, c = group([[0, 0]], gid=3), group([[1, 1]], gid=4), group([[2, 2]], gid=5)
    ordered, arrived = concat_groups([a, b, c], pad_id=9), concat_groups([c, a, b], pad_id=9)
    assert arrived.group_ids.tolist() == [3, 4, 5]
    assert torch.equal(arrived.versions, ordered.versions)


@pytest.mark.parametrize("bad", [dict(max_staleness=-1), dict(recency_decay=0.0)])
def test_validation(bad):
    kw = dict(max_staleness=1, groups_per_batch=1, samples_per_group=1) | bad
    with pytest.raises(ValueError, match=next(iter(bad))):
        StalenessBuffer(**kw)


def test_max_ahead_narrows_admission_but_not_the_drop_bound():
    """W = max_ahead replaces K in the admission rule only: (W + V + 1)·B samples may start."""
    buf = StalenessBuffer(4, groups_per_batch=2, samples_per_group=4, max_ahead=1)
    assert buf.capacity(0) == (1 + 0 + 1) * 8
    assert buf.try_admit(16, 0) and not buf.try_admit(1, 0)
    assert buf.capacity(3) == (1 + 3 + 1) * 8 - 16
    # data up to K = 4 versions old are still accepted at consumption
    buf.add(group([[0, 0]] * 4))
    buf.add(group([[0, 0]] * 4, gid=1))
    assert buf.ready(4) and not StalenessBuffer(4, 2, 4, max_ahead=1).ready(4)
    # W is capped at K, and None means K (AReaL's rule)
    assert StalenessBuffer(2, 1, 1, max_ahead=9).capacity(0) == 3
    assert StalenessBuffer(2, 1, 1).capacity(0) == 3
    with pytest.raises(ValueError, match="max_ahead"):
        StalenessBuffer(2, 1, 1, max_ahead=-1)
