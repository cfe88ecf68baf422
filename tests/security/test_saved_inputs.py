"""A resume checks the ``.inputs/`` files its saved configuration names against the content hash in
their names before loading the configuration (which imports reward functions and unpickles
``.inputs/*.pkl``): a pickle changed after asyncrl wrote it is refused in one line naming the key
and the file, and never unpickled."""

import importlib
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from asyncrl.config import ConfigError


class _CreatesMarker:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def _saved_run(tmp_path: Path, **inputs) -> Path:
    """``runs/r`` with the config.yaml of a run that asyncrl.train started with ``inputs`` (a reward
    function defined in a script, a dataset given as a list...), written as a run writes it."""
    from asyncrl.api import build_config

    def script_reward(completions, **kwargs):  # a local function: pickled by value into .inputs/
        return [0.0 for _ in completions]

    cfg = build_config(reward_funcs=[script_reward], run__out_dir=str(tmp_path / "runs"), run__name="r",
                       **inputs)
    run_dir = tmp_path / "runs" / "r"
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return run_dir


def _only(pattern: str, tmp_path: Path) -> Path:
    found = sorted((tmp_path / "runs" / ".inputs").glob(pattern))
    assert len(found) == 1, found
    return found[0]


def test_untouched_inputs_resume(tmp_path):
    from asyncrl.runtime.resume import resume_config

    run_dir = _saved_run(tmp_path, train_dataset=[{"question": "1+1?", "answer": "2"}] * 4)
    cfg = resume_config(run_dir, [])
    assert cfg.reward.funcs[0].startswith(str(_only("reward-*.pkl", tmp_path)))


def test_a_tampered_pickle_is_refused_before_it_is_unpickled(tmp_path):
    """``asyncrl train --resume`` in a process of its own (this one holds the genuine function
    already: asyncrl.core.import_path loads a pickle once per process)."""
    run_dir = _saved_run(tmp_path)
    pickled = _only("reward-*.pkl", tmp_path)
    marker = tmp_path / "MARKER"
    pickled.write_bytes(pickle.dumps(_CreatesMarker(marker)))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ASYNCRL_CACHE": str(tmp_path / "cache")}
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", "--resume", str(run_dir)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=240)
    assert not marker.exists(), "the tampered pickle was unpickled"
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert "reward.funcs" in lines[0] and str(pickled) in lines[0], lines[0]
    assert "does not match the content hash" in lines[0], lines[0]


def test_an_auto_resume_checks_the_saved_inputs_too(tmp_path, monkeypatch):
    """``run.resume=auto`` compares the run's configuration with the saved one, which it loads
    without ``--resume``'s path: the same check comes first there."""
    from asyncrl.config import load_config
    from asyncrl.runtime.resume import check_compatible

    resolve = importlib.import_module("asyncrl.core.import_path")

    run_dir = _saved_run(tmp_path)
    marker = tmp_path / "MARKER"
    _only("reward-*.pkl", tmp_path).write_bytes(pickle.dumps(_CreatesMarker(marker)))
    monkeypatch.setattr(resolve, "_UNPICKLED", {})  # building the run loaded the genuine pickle here
    cfg = load_config(overrides=[f"run.out_dir={run_dir.parent}", "run.name=r", "run.resume=auto"])
    with pytest.raises(ConfigError, match=r"reward\.funcs.*does not match the content hash"):
        check_compatible(cfg, run_dir)
    assert not marker.exists(), "the tampered pickle was unpickled"


def test_a_tampered_dataset_and_an_unhashed_name_are_refused(tmp_path):
    from asyncrl.runtime.saved_inputs import check_saved_inputs

    run_dir = _saved_run(tmp_path, train_dataset=[{"question": "1+1?", "answer": "2"}] * 4)
    data = _only("train_dataset-*.jsonl", tmp_path)
    data.write_text(data.read_text() + '{"question": "added", "answer": "0"}\n')
    with pytest.raises(ConfigError, match=r"task\.path.*does not match the content hash"):
        check_saved_inputs(run_dir / "config.yaml")

    renamed = data.with_name("train_dataset.jsonl")
    data.rename(renamed)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    saved["task"]["path"] = str(renamed)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ConfigError, match=r"task\.path.*without the content hash"):
        check_saved_inputs(run_dir / "config.yaml")


def test_a_saved_reward_model_hashes_as_it_was_named(tmp_path, tiny_policy):
    """The folder digest is the one asyncrl.rewards.reward_model.save_reward_model names it by."""
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from asyncrl.rewards.reward_model import save_reward_model
    from asyncrl.runtime.saved_inputs import check_saved_inputs

    _, tokenizer, _ = tiny_policy
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(config)
    folder = Path(save_reward_model(model, tokenizer, tmp_path / ".inputs"))
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"reward": {"models": [str(folder)]}}))
    check_saved_inputs(tmp_path / "config.yaml")
    (folder / "config.json").write_text((folder / "config.json").read_text() + "\n")
    with pytest.raises(ConfigError, match=r"reward\.models.*does not match the content hash"):
        check_saved_inputs(tmp_path / "config.yaml")


def test_ranks_saving_one_reward_model_at_once_share_one_folder(tmp_path, tiny_policy, monkeypatch):
    """Every torchrun rank saves the reward model it was given: a rank whose rename finds the folder
    made by another rank meanwhile (after it looked, before it renamed) reuses it. Before, the
    rename failed (ENOTEMPTY) and the rank stopped."""
    import shutil

    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    from asyncrl.rewards import reward_model

    _, tokenizer, _ = tiny_policy
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, num_labels=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = Qwen2ForSequenceClassification(config)
    other = Path(reward_model.save_reward_model(model, tokenizer, tmp_path / "other-rank"))
    real_replace, raced = reward_model.os.replace, []

    def other_rank_first(src, dst):  # the other rank's rename lands just before this one's
        if Path(dst).name.startswith("reward_model-") and not Path(dst).exists():
            shutil.copytree(other.parent, dst)
            raced.append(dst)
        return real_replace(src, dst)

    monkeypatch.setattr(reward_model.os, "replace", other_rank_first)
    inputs = tmp_path / ".inputs"
    mine = Path(reward_model.save_reward_model(model, tokenizer, inputs))
    assert raced and mine.parent.name == other.parent.name and (mine / "config.json").is_file()
    assert sorted(p.name for p in inputs.iterdir()) == [mine.parent.name]  # no staging copy left
