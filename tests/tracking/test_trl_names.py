"""TRL's metric names: the quantities TRL's GRPOTrainer logs reach the trackers under TRL's names
too (``train/reward``, ``train/rewards/<fn>/mean``...), from the record's own keys; the new record
keys behind them (reward spread, clipped completions) hand-worked."""

from __future__ import annotations

import math

import pytest
import torch

from asyncrl.runtime.record import clipped_frac, reward_spread
from asyncrl.tracking.metrics import MetricsWriter
from asyncrl.tracking.names import TRL_NAMES, tracker_name, trl_aliases
from asyncrl.types import Batch


class Scalars:
    def __init__(self):
        self.scalars = {}

    def log_scalars(self, step, scalars):
        self.scalars[step] = dict(scalars)

    def log_histogram(self, step, name, counts):
        pass

    def flush(self):
        pass

    def close(self):
        pass


RECORD = {"reward_mean": 0.5, "reward_std": 0.25, "zero_reward_std_frac": 0.75, "completion_len_mean": 12.0,
          "completion_clipped_frac": 0.125, "clipfrac_lower": 0.01, "clipfrac_upper": 0.02, "kl_ref": 0.003,
          "entropy": 1.5, "loss": -0.1, "grad_norm": 0.9, "lr_effective": 3e-5, "reward/hit": 0.4,
          "reward_std/hit": 0.2, "reward/fmt": math.nan, "reward/errors": 2, "staleness_token_mean": 1.0}


def test_trl_aliases_hand_worked():
    assert trl_aliases(RECORD) == {
        "train/reward": 0.5, "train/reward_std": 0.25, "train/frac_reward_zero_std": 0.75,
        "train/completions/mean_length": 12.0, "train/completions/clipped_ratio": 0.125,
        "train/clip_ratio/low_mean": 0.01, "train/clip_ratio/high_mean": 0.02,
        "train/clip_ratio/region_mean": pytest.approx(0.03), "train/kl": 0.003, "train/entropy": 1.5,
        "train/loss": -0.1, "train/grad_norm": 0.9, "train/learning_rate": 3e-5,
        "train/rewards/hit/mean": 0.4, "train/rewards/hit/std": 0.2}  # NaN and reward/errors left out
    assert trl_aliases({"eval_reward": 0.3, "staleness_token_mean": 2.0}) == {}


def test_trackers_get_both_names_and_metrics_jsonl_only_ours(tmp_path):
    tracker = Scalars()
    writer = MetricsWriter(tmp_path, [tracker])
    writer.write(1, dict(RECORD))
    writer.close()
    sent = tracker.scalars[1]
    assert sent["rollout/reward_mean"] == sent["train/reward"] == 0.5
    assert sent["reward/hit"] == sent["train/rewards/hit/mean"] == 0.4
    assert sent["train/entropy"] == 1.5 and sent["train/grad_norm"] == 0.9  # ours already: one entry
    row = (tmp_path / "metrics.jsonl").read_text()
    assert "train/reward" not in row and '"reward_mean": 0.5' in row


def test_every_trl_alias_comes_from_a_namespaced_record_key():
    assert all(not tracker_name(key).startswith("other/") for key in TRL_NAMES)


def _batch(rewards, groups, ids, mask) -> Batch:
    b, t = len(ids), len(ids[0])
    return Batch(prompt_ids=torch.ones(b, 1, dtype=torch.long), prompt_mask=torch.ones(b, 1, dtype=torch.bool),
                 completion_ids=torch.tensor(ids), completion_mask=torch.tensor(mask), behav_logp=torch.zeros(b, t),
                 versions=torch.zeros(b, t, dtype=torch.long), rewards=torch.tensor(rewards),
                 group_ids=torch.tensor(groups), advantages=torch.zeros(b))


def test_reward_spread_and_clipped_frac_hand_worked():
    eos = 2
    ids = [[5, 2, 0], [5, 6, 7], [2, 0, 0], [5, 6, 0]]
    mask = [[True, True, False], [True, True, True], [True, False, False], [False, False, False]]
    batch = _batch([0.3, 0.3, 1.0, 0.0], [0, 0, 1, 1], ids, mask)
    spread = reward_spread(batch)
    # group 0: equal rewards (no GRPO signal); group 1 differs
    assert spread["zero_reward_std_frac"] == 0.5
    assert spread["reward_std"] == pytest.approx(torch.tensor([0.3, 0.3, 1.0, 0.0], dtype=torch.float64).std().item())
    # rows: ends with eos | cut at the limit | eos at once | nothing generated (counted as cut)
    assert clipped_frac(batch, eos) == 0.5
    assert clipped_frac(batch, None) is None

