"""Tracker names of the per-step record's keys: one table, one family per quantity.

``metrics.jsonl`` keeps the record's flat keys (``staleness_token_mean``): the bench runner, the
resume checks, ``summary.json`` and every test read them, and a rename there would break old run
directories. Trackers (TensorBoard, W&B, MLflow, trackio) show the namespaced name from this table
(``staleness/token_mean``), so their dashboards group related curves. A key that already holds a
``/`` (``reward/<fn>``) is taken as namespaced; a key missing from the table lands in ``other/``
(tests/tracking checks that no record key does).

Trackers also get the quantities TRL's ``GRPOTrainer`` logs under TRL's own names
(:func:`trl_aliases`: ``train/reward``, ``train/rewards/<fn>/mean``, ``train/kl``...), so a
TensorBoard or W&B dashboard made for TRL runs shows asyncrl runs too.
"""

from __future__ import annotations

import math

SKIP = None  # not sent to trackers: it repeats another key's quantity

_FAMILIES: dict[str, tuple[str, ...]] = {
    "rollout": ("reward_mean", "reward_std", "zero_reward_std_frac", "completion_len_mean",
                "completion_clipped_frac", "empty_completion_frac", "gen_tokens", "gen_tokens_per_s",
                "throughput_tokens_per_s"),
    "eval": ("eval_reward",),
    "staleness": ("staleness_token_min", "staleness_token_mean", "staleness_token_max",
                  "staleness_seq_min", "staleness_seq_mean", "staleness_seq_max",
                  "multi_version_seq_frac", "future_version_tokens"),
    "timing": ("gen_time_s", "train_time_s", "prox_time_s", "trainer_wait_s", "step_time_s",
               "generator_util", "trainer_util", "elapsed_s"),
    "weights": ("weight_publish_s", "weight_pull_s", "weight_updates_midgen"),
    "buffer": ("buffer_samples", "inflight_units", "dropped_samples", "dropped_samples_total", "max_ahead"),
    "workers": ("lost_units_total", "worker_restarts"),
    "train": ("grad_norm", "entropy", "skipped_updates", "lr", "lr_scale", "lr_effective", "ess_frac",
              "ess_frac_first", "ess_frac_min", "adv_mean", "adv_std", "frac_zero_adv_groups",
              "ess_warning", "ess_rollback_to", "version", "logp_mismatch"),
    # the objective's value and diagnostics (asyncrl.objectives.stats and each loss's extras)
    "loss": ("loss", "kl_ref", "n_valid_tokens", "n_valid_seqs", "nonfinite_tokens", "importance_weight_mean",
             "importance_weight_min", "importance_weight_max", "tv", "clipped_tokens", "masked_token_frac",
             "masked_seq_frac", "ratio_mean", "ratio_min", "ratio_max", "approx_kl_k1", "approx_kl_k3",
             "clipfrac_upper", "clipfrac_lower", "dual_clipfrac", "behav_weight_mean", "behav_weight_min",
             "behav_weight_max", "behav_kl_k1", "behav_capped_frac", "applied_weight_mean",
             "applied_weight_max", "chi2", "truncated_frac", "seq_ratio_mean", "seq_ratio_min",
             "seq_ratio_max", "seq_clipfrac", "masked_neg_adv_seq_frac", "seq_kl_mean", "seq_kl_max",
             "kl_penalty", "m2_before", "m2_after", "m2po_eps_low", "m2po_eps_high", "beyond_trust_frac",
             "tv_estimate", "filter_fired", "detached_token_frac", "prox_abs_err_mean", "prox_abs_err_max",
             "seq_behav_weight_mean", "seq_behav_weight_max", "seq_behav_capped_frac", "behav_truncated_mass",
             # dppo's trust-region masks, vespo's gamma weight, sapo's gate
             "masked_upper_frac", "masked_lower_frac", "ratio_capped_frac", "divergence_mean", "divergence_max",
             "gamma_weight_mean", "gamma_weight_min", "gamma_weight_max", "gate_grad_weight_mean",
             "gate_grad_weight_min"),
}
# the family's prefix is dropped from the short name where it only repeats it
_STRIP = {"staleness": "staleness_", "eval": "eval_", "weights": "weight_", "workers": "worker_"}

TRACKER_NAMES: dict[str, str | None] = {
    key: f"{family}/{key.removeprefix(_STRIP.get(family, '')) or key}"
    for family, keys in _FAMILIES.items() for key in keys
}
# the objective's own staleness_{mean,min,max}: the same tokens as staleness_token_*, per minibatch
TRACKER_NAMES.update({"staleness_mean": SKIP, "staleness_min": SKIP, "staleness_max": SKIP})
# not scalars: the histogram goes to trackers through log_histogram
TRACKER_NAMES["staleness_token_hist"] = SKIP


# key families whose members depend on the configuration (eval.pass_k → eval_pass_at_<k>)
PREFIXES = {"eval_": "eval/"}


def tracker_name(key: str) -> str | None:
    """The namespaced name of record key ``key``; None = not sent to trackers."""
    if "/" in key:
        return key
    if key in TRACKER_NAMES:
        return TRACKER_NAMES[key]
    for prefix, family in PREFIXES.items():
        if key.startswith(prefix):
            return family + key.removeprefix(prefix)
    return f"other/{key}"


# record key → the name TRL's GRPOTrainer logs the same quantity under, as its trackers show it:
# transformers' TensorBoard and W&B callbacks put "train/" before a training metric ("eval_reward"
# becomes "eval/reward", which is already ours). docs/monitoring.md lists them.
TRL_NAMES: dict[str, str] = {
    "reward_mean": "train/reward",
    "reward_std": "train/reward_std",
    "zero_reward_std_frac": "train/frac_reward_zero_std",
    "completion_len_mean": "train/completions/mean_length",
    "completion_clipped_frac": "train/completions/clipped_ratio",
    "clipfrac_lower": "train/clip_ratio/low_mean",
    "clipfrac_upper": "train/clip_ratio/high_mean",
    "kl_ref": "train/kl",
    "entropy": "train/entropy",
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr_effective": "train/learning_rate",
}
# per reward function: record key prefix → (TRL's name before the function's name, after it)
TRL_PREFIXES: dict[str, tuple[str, str]] = {"reward/": ("train/rewards/", "/mean"),
                                            "reward_std/": ("train/rewards/", "/std")}


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def trl_aliases(record: dict) -> dict[str, float]:
    """TRL's name → value for the record's quantities that TRL logs too (finite numbers only);
    ``train/clip_ratio/region_mean`` is the sum of the two clip fractions, whose tokens never
    overlap (the advantage is either positive or negative)."""
    out = {TRL_NAMES[k]: v for k, v in record.items() if k in TRL_NAMES and _finite(v)}
    for key, value in record.items():
        for prefix, (before, after) in TRL_PREFIXES.items():
            if key.startswith(prefix) and key != "reward/errors" and _finite(value):
                out[before + key.removeprefix(prefix) + after] = value
    low, high = record.get("clipfrac_lower"), record.get("clipfrac_upper")
    if _finite(low) and _finite(high):
        out["train/clip_ratio/region_mean"] = low + high
    return out
