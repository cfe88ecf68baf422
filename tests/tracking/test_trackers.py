"""Trackers: the name table covers every record key, the registry refuses missing packages at
config load, MetricsWriter sends namespaced scalars / the staleness histogram / tables to any
object with the Tracker methods, and TensorBoard gets them as scalars, a histogram and text."""

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from asyncrl.config import ConfigError
from asyncrl.runtime.validate import load_run_config
from asyncrl.tracking.metrics import MetricsWriter
from asyncrl.runtime.record import step_record
from asyncrl.tracking import TRACKERS, check_available, markdown_table, open_trackers
from asyncrl.tracking.names import TRACKER_NAMES, tracker_name
from asyncrl.types import Batch

sys.path.insert(0, str(Path(__file__).parents[1] / "objectives"))
from helpers import all_loss_names, make_batch, run  # noqa: E402


class FakeTracker:
    def __init__(self):
        self.scalars, self.hists, self.tables, self.closed = {}, {}, {}, False

    def log_scalars(self, step, scalars):
        self.scalars[step] = dict(scalars)

    def log_histogram(self, step, name, counts):
        self.hists[(step, name)] = list(counts)

    def log_table(self, step, name, columns, rows):
        self.tables[(step, name)] = (columns, rows)

    def flush(self):
        pass

    def close(self):
        self.closed = True


def tiny_batch(versions: list[list[int]], mask: list[list[bool]]) -> Batch:
    b, t = len(versions), len(versions[0])
    return Batch(prompt_ids=torch.ones(b, 2, dtype=torch.long), prompt_mask=torch.ones(b, 2, dtype=torch.bool),
                 completion_ids=torch.ones(b, t, dtype=torch.long), completion_mask=torch.tensor(mask),
                 behav_logp=torch.zeros(b, t), versions=torch.tensor(versions),
                 rewards=torch.tensor([1.0, 0.0][:b]), group_ids=torch.zeros(b, dtype=torch.long),
                 advantages=torch.zeros(b))


def test_every_objective_stat_has_a_namespace():
    for name in all_loss_names():
        _, stats, _ = run(name, make_batch(0, 4, 6))
        missing = [k for k in stats if (tracker_name(k) or "").startswith("other/")]
        assert not missing, f"loss {name}: add {missing} to asyncrl.tracking.names"


def test_every_runtime_record_key_has_a_namespace():
    batch = tiny_batch([[3, 3, 2], [1, 1, -1]], [[True, True, True], [True, True, False]])
    trainer_stats = {"train_time_s": 0.1, "prox_time_s": 0.0, "loss": 0.5, "grad_norm": 1.0, "entropy": 2.0,
                     "ess_frac": 0.9, "ess_frac_first": 0.9, "ess_frac_min": 0.8, "lr_scale": 1.0,
                     "lr_effective": 1e-5, "skipped_updates": 0.0, "adv_mean": 0.0, "adv_std": 1.0,
                     "frac_zero_adv_groups": 0.0}
    async_metrics = {"gen_time_s": 1.0, "gen_tokens": 5, "weight_pull_s": 0.1, "weight_updates_midgen": 0,
                     "weight_publish_s": 0.1, "buffer_samples": 4, "inflight_units": 1, "dropped_samples": 0,
                     "dropped_samples_total": 0, "lost_units_total": 0, "worker_restarts": 0, "max_ahead": 1}
    record = step_record(batch, 3, trainer_stats, async_metrics, wait_s=0.2, step_s=1.0, n_generators=1)
    record.update(eval_reward=0.5, elapsed_s=3.0, ess_warning=1, ess_rollback_to=-1)
    names = {k: tracker_name(k) for k in record}
    assert not [k for k, n in names.items() if n is not None and n.startswith("other/")]
    families = {n.split("/")[0] for n in names.values() if n}
    assert {"rollout", "staleness", "timing", "weights", "buffer", "train", "loss", "eval"} <= families
    # one family for staleness: nothing named stale* outside it
    assert all(n.startswith("staleness/") for k, n in names.items() if n and "stale" in k)


def test_names_are_unique_and_passthrough():
    named = [n for n in TRACKER_NAMES.values() if n]
    assert len(named) == len(set(named))
    assert tracker_name("reward/format") == "reward/format"  # already namespaced: as is
    assert tracker_name("staleness_token_mean") == "staleness/token_mean"
    assert tracker_name("eval_reward") == "eval/reward" and tracker_name("eval_pass_at_4") == "eval/pass_at_4"
    assert tracker_name("staleness_mean") is None  # the objective's copy of staleness_token_mean
    assert tracker_name("brand_new_key") == "other/brand_new_key"


def test_staleness_histogram_hand_worked():
    # trainer at version 3: tokens of versions 3,3,2 | 1,1 (the -1 is padding) → lags 0,0,1,2,2
    batch = tiny_batch([[3, 3, 2], [1, 1, -1]], [[True, True, True], [True, True, False]])
    record = step_record(batch, 3, {"train_time_s": 0.1}, {}, wait_s=0.0, step_s=1.0, n_generators=1)
    assert record["staleness_token_hist"] == [2, 1, 2]
    assert sum(record["staleness_token_hist"]) == int(batch.completion_mask.sum())


@pytest.mark.parametrize("name", [n for n in ("wandb", "mlflow", "trackio") if importlib.util.find_spec(n) is None])
def test_missing_tracker_package_is_a_one_line_config_error(name):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"run.report_to=[tensorboard,{name}]"])
    message = str(err.value)
    assert "\n" not in message and "run.report_to" in message and f"pip install {TRACKERS[name].pip}" in message


def test_report_to_default_unknown_and_deprecated_alias():
    assert load_run_config(None, []).run.report_to == ["tensorboard"]
    assert load_run_config(None, ["run.tensorboard=false"]).run.report_to == []
    with pytest.raises(ConfigError, match=r"run.report_to: must be one of .*; got 'tensorbord' \(did you mean 'tensorboard'\?\)"):
        load_run_config(None, ["run.report_to=[tensorbord]"])
    check_available(["tensorboard"])


def test_metrics_writer_sends_namespaced_names_to_trackers(tmp_path):
    fake = FakeTracker()
    writer = MetricsWriter(tmp_path, [fake])
    writer.write(0, {"eval_reward": 0.25})
    writer.write(1, {"reward_mean": 0.5, "staleness_token_mean": 1.0, "staleness_mean": 1.0, "loss": math.nan,
                     "staleness_token_hist": [1, 2], "ess_warning": True})
    writer.write_table(1, "completions", ["prompt", "reward"], [["1+1", 1.0]])
    writer.close()
    assert fake.scalars[0] == {"eval/reward": 0.25}
    assert fake.scalars[1] == {"rollout/reward_mean": 0.5, "staleness/token_mean": 1.0,  # NaN, dup, bool out
                               "train/reward": 0.5}  # and TRL's name of the reward
    assert fake.hists[(1, "staleness/token_hist")] == [1, 2]
    assert fake.tables[(1, "completions")] == (["prompt", "reward"], [["1+1", 1.0]])
    assert fake.closed
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[0] == {"step": 0, "eval_reward": 0.25}
    assert rows[1]["staleness_token_mean"] == 1.0 and rows[1]["loss"] is None  # flat keys kept


def test_tensorboard_tracker_writes_scalars_histogram_and_text(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = load_run_config(None, [])
    (tracker,) = open_trackers(["tensorboard"], tmp_path, cfg)
    writer = MetricsWriter(tmp_path, [tracker])
    writer.write(1, {"reward_mean": 0.5, "staleness_token_hist": [3, 0, 1]})
    writer.write_table(1, "completions", ["prompt", "completion"], [["a|b", "c\nd"]])
    writer.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"tensors": 0}).Reload()
    assert acc.Scalars("rollout/reward_mean")[0].value == 0.5
    hist = acc.Histograms("staleness/token_hist")[0].histogram_value
    assert hist.num == 4 and hist.sum == 2 and list(hist.bucket) == [3, 0, 1]
    text = acc.Tensors("completions/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "a\\|b" in text and "c ⏎ d" in text


def test_markdown_table_escapes():
    table = markdown_table(["x", "y"], [["a|b", 0.123456]])
    assert table.splitlines() == ["| x | y |", "|---|---|", "| a\\|b | 0.123 |"]


def test_wandb_tracker_in_disabled_mode_does_not_raise(tmp_path, monkeypatch):
    """WANDB_MODE=disabled records nothing to read back: this checks the calls go through."""
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    (tracker,) = open_trackers(["wandb"], tmp_path, load_run_config(None, []))
    writer = MetricsWriter(tmp_path, [tracker])
    writer.write(1, {"reward_mean": 0.5, "staleness_token_hist": [3, 1]})
    writer.write_table(1, "completions", ["prompt", "reward"], [["1+1", 1.0]])
    writer.close()


def test_a_backend_that_fails_to_start_is_one_line_and_closes_the_others(tmp_path, monkeypatch):
    """e.g. MLflow refusing its tracking URI: a ConfigError naming the backend, not a traceback."""
    import sys
    import types as _types

    from asyncrl.tracking import TrackerEntry

    opened = FakeTracker()

    def refuse(run_dir, cfg, after_step):
        raise RuntimeError("the filesystem tracking backend is in maintenance mode\nmore detail")

    fake = _types.ModuleType("fake_tracker_backends")
    fake.open_good, fake.open_bad = (lambda run_dir, cfg, after_step: opened), refuse
    monkeypatch.setitem(sys.modules, fake.__name__, fake)  # as if imported: the entries' targets resolve to it
    monkeypatch.setitem(TRACKERS, "good", TrackerEntry(f"{fake.__name__}:open_good"))
    monkeypatch.setitem(TRACKERS, "bad", TrackerEntry(f"{fake.__name__}:open_bad"))
    with pytest.raises(ConfigError) as err:
        open_trackers(["good", "bad"], tmp_path, load_run_config())
    message = str(err.value)
    assert "run.report_to" in message and "bad could not start: RuntimeError" in message
    assert "\n" not in message and "more detail" not in message
    assert opened.closed
