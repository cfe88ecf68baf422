"""The per-step record and the run totals, built once for every mode, one name per quantity.

    gen_time_s        generation seconds spent on this step's data (sync: the generate call;
                      async: the workers' busy seconds, summed over workers)
    gen_tokens        completion tokens generated during the step
    gen_tokens_per_s  gen_tokens / gen_time_s: the engine's speed, in every mode
    throughput_tokens_per_s  gen_tokens / step_time_s: what the whole loop moved
    trainer_wait_s    seconds the trainer waited for its batch (sync: all of generation)
    weight_publish_s / weight_pull_s   weight-sync seconds, trainer side / generator side
    timing/<phase>_s  the loop's own phases (train, publish, evaluate, ...: asyncrl.runtime.timing)
"""

from __future__ import annotations

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
    record = {"reward_mean": batch.rewards.mean().item(), **staleness_metrics(batch, version), **stats,
              **source_metrics}
    record.update({
        "version": version + 1, "trainer_wait_s": wait_s, "step_time_s": step_s,
        "gen_tokens_per_s": tokens / gen_s if gen_s > 0 else 0.0,
        "throughput_tokens_per_s": tokens / max(step_s, 1e-9),
        "generator_util": min(1.0, gen_s / max(step_s * n_generators, 1e-9)),
        "trainer_util": stats["train_time_s"] / max(step_s, 1e-9),
        "completion_len_mean": int(batch.completion_mask.sum()) / len(batch),
    })
    return record


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
