"""The per-step record and the run totals, built once for every mode, one name per quantity.

    gen_time_s        generation seconds spent on this step's data (sync: the generate call;
                      async: the workers' busy seconds, summed over workers)
    gen_tokens        completion tokens generated during the step
    gen_tokens_per_s  gen_tokens / gen_time_s: the engine's speed, in every mode
    throughput_tokens_per_s  gen_tokens / step_time_s: what the whole loop moved
    trainer_wait_s    seconds the trainer waited for its batch (sync: all of generation)
    weight_publish_s / weight_pull_s   weight-sync seconds, trainer side / generator side
    reward_std        standard deviation of the batch's total rewards (n - 1, as TRL's reward_std)
    zero_reward_std_frac  fraction of prompt groups whose rewards are all equal (no GRPO signal;
                      TRL's frac_reward_zero_std)
    completion_clipped_frac  fraction of completions cut at the length limit, not ended by eos
                      (TRL's completions/clipped_ratio; :func:`clipped_frac`, added by the step log)
    timing/<phase>_s  the loop's own phases (train, publish, evaluate, ...: asyncrl.runtime.timing)
"""

from __future__ import annotations

import torch

from asyncrl.runtime.stats import staleness_metrics
from asyncrl.types import Batch

# per-step record key → summary key (mean per step)
PER_STEP = {"gen_time_s": "gen_time_per_step_s", "train_time_s": "train_time_per_step_s",
            "prox_time_s": "prox_time_per_step_s", "trainer_wait_s": "wait_time_per_step_s",
            "weight_publish_s": "weight_publish_per_step_s", "weight_pull_s": "weight_pull_per_step_s"}


def step_record(batch: Batch, version: int, stats: dict, source_metrics: dict, *, wait_s: float,
                step_s: float, n_generators: int) -> dict:
    """``version``: the trainer's version when it took the batch (staleness is measured against it)."""
    gen_s, tokens = source_metrics.get("gen_time_s", 0.0), source_metrics.get("gen_tokens", 0)
    record = {"reward_mean": batch.rewards.mean().item(), **reward_spread(batch), **staleness_metrics(batch, version),
              **stats, **source_metrics}
    record.update({
        "version": version + 1, "trainer_wait_s": wait_s, "step_time_s": step_s,
        "gen_tokens_per_s": tokens / gen_s if gen_s > 0 else 0.0,
        "throughput_tokens_per_s": tokens / max(step_s, 1e-9),
        "generator_util": min(1.0, gen_s / max(step_s * n_generators, 1e-9)),
        "trainer_util": stats["train_time_s"] / max(step_s, 1e-9),
        "completion_len_mean": int(batch.completion_mask.sum()) / len(batch),
    })
    return record


def reward_spread(batch: Batch) -> dict[str, float]:
    """``reward_std`` and ``zero_reward_std_frac`` (a group counts when its std is 0 within
    ``torch.isclose``, as TRL's; a group of one counts)."""
    rewards = batch.rewards.double()
    groups = [rewards[batch.group_ids == g] for g in batch.group_ids.unique()]
    zero = torch.zeros((), dtype=torch.float64)
    flat = sum(len(g) < 2 or bool(torch.isclose(g.std(), zero)) for g in groups)
    return {"reward_std": rewards.std().item() if len(rewards) > 1 else 0.0,
            "zero_reward_std_frac": flat / max(1, len(groups))}


def clipped_frac(batch: Batch, eos_id: int | None) -> float | None:
    """The fraction of rows whose last generated token is not ``eos_id``: cut by the length limit
    (None without an eos id)."""
    if eos_id is None or not len(batch):
        return None
    mask = batch.completion_mask.bool()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = torch.where(mask, positions, -1).max(dim=1).values  # -1: nothing generated
    last_token = batch.completion_ids.gather(1, last.clamp(min=0).unsqueeze(1)).squeeze(1)
    return float(((last < 0) | (last_token != eos_id)).float().mean())


class Totals:
    """Sums over steps → the summary's per-step means and overall generation speed."""

    def __init__(self):
        self.sums = {key: 0.0 for key in PER_STEP}
        self.tokens = 0

    def add(self, record: dict) -> None:
        for key in PER_STEP:
            self.sums[key] += record.get(key, 0.0)
        self.tokens += record.get("gen_tokens", 0)

    def state_dict(self) -> dict:
        return {"sums": dict(self.sums), "tokens": self.tokens}

    def load_state_dict(self, state: dict) -> None:
        self.sums.update({k: float(v) for k, v in state["sums"].items()})
        self.tokens = int(state["tokens"])

    def summary(self, steps: int) -> dict:
        n = max(steps, 1)
        out = {name: self.sums[key] / n for key, name in PER_STEP.items()}
        out["gen_tokens_per_s"] = self.tokens / self.sums["gen_time_s"] if self.sums["gen_time_s"] else 0.0
        return out
