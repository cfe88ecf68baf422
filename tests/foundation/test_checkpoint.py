"""Checkpoint files: atomic under a crash mid-write, rolling, loadable without arbitrary pickle."""

import random

import numpy as np
import pytest
import torch

from asyncrl.training.checkpoint import (
    global_rng_state,
    latest_checkpoint,
    load_states,
    save_checkpoint,
    set_global_rng_state,
    step_dirs,
)


def _save(tmp_path, tiny_policy, step, keep=2, run_state=None):
    model, tokenizer, _ = tiny_policy
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer_state = {"optimizer": optimizer.state_dict(), "version": step, "rng": torch.Generator().get_state()}
    return save_checkpoint(tmp_path, step, model, tokenizer, trainer_state,
                           run_state or {"source": {}, "session": {}, "totals": {}}, keep=keep)


def test_rolling_and_latest_link(tmp_path, tiny_policy):
    for step in (1, 2, 3):
        _save(tmp_path, tiny_policy, step, keep=2)
    assert [s for s, _ in step_dirs(tmp_path)] == [2, 3]
    assert latest_checkpoint(tmp_path).name == "step-000003"
    assert (tmp_path / "checkpoint").resolve() == latest_checkpoint(tmp_path).resolve()
    assert (tmp_path / "checkpoint" / "model.safetensors").is_file()


@pytest.mark.parametrize("keep, kept", [(1, [4]), (3, [2, 3, 4]), (0, [1, 2, 3, 4])])
def test_keep_newest_n(tmp_path, tiny_policy, keep, kept):
    for step in (1, 2, 3, 4):
        _save(tmp_path, tiny_policy, step, keep=keep)
    assert [s for s, _ in step_dirs(tmp_path)] == kept  # keep=0: every checkpoint
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [f"step-{s:06d}" for s in kept]


def test_crash_during_write_keeps_previous(tmp_path, tiny_policy, monkeypatch):
    _save(tmp_path, tiny_policy, 1)
    real_save = torch.save

    def dies_midway(obj, path, *args, **kwargs):
        if str(path).endswith("run_state.pt"):
            raise OSError("disk full")  # the model and trainer state are already written
        return real_save(obj, path, *args, **kwargs)

    monkeypatch.setattr(torch, "save", dies_midway)
    with pytest.raises(OSError):
        _save(tmp_path, tiny_policy, 2)
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step-000001"
    trainer_state, _ = load_states(latest_checkpoint(tmp_path))
    assert trainer_state["step"] == 1
    _save(tmp_path, tiny_policy, 3)  # the next save clears the torn folder
    assert not list((tmp_path / "checkpoints").glob("*.tmp"))


def test_states_load_weights_only_and_rngs_round_trip(tmp_path, tiny_policy):
    run_state = {"source": {"prompts": {"rng": random.Random(3).getstate(), "queue": [4, 5]}},
                 "session": {"eval_history": [[0, 0.5]]}, "totals": {"tokens": 7}}
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    path = _save(tmp_path, tiny_policy, 5, run_state=run_state)
    trainer_state, loaded = load_states(path)  # torch.load(weights_only=True) inside
    assert loaded["source"]["prompts"]["queue"] == [4, 5] and loaded["totals"]["tokens"] == 7
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_global_rng_state(trainer_state["global_rng"])
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])


def test_global_rng_state_is_weights_only_safe(tmp_path):
    torch.save(global_rng_state(), tmp_path / "rng.pt")
    loaded = torch.load(tmp_path / "rng.pt", weights_only=True)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    set_global_rng_state(loaded)  # what weights_only loading gave back still restores every generator
    assert (random.random(), np.random.rand()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
