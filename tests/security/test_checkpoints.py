"""A checkpoint from someone else runs no code: a sharded checkpoint's ``optimizer/.metadata`` (a
pickle torch.distributed.checkpoint writes) replaced by one whose unpickling would create a marker
file is refused in one line by ``asyncrl export`` and ``asyncrl train --resume`` (exit 2, the
marker never made, the checkpoint left where it is), and is never read when the checkpoint is
used as ``policy.model_path``. A metadata file that unpickles cleanly but points a shard outside
its folder is refused too."""

import copy
import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from asyncrl.training.checkpoint import save_checkpoint
from asyncrl.training.sharded_state import SHARDS, save_shards, shard_entry

METADATA = ".metadata"


class _CreatesMarker:
    """Unpickled, it calls ``open(marker, "w")``: the file appears only if the pickle runs."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def _sharded_run(tmp_path: Path, tiny_policy) -> Path:
    """A run directory (``runs/r``) whose one checkpoint has optimizer shards, and the config.yaml
    a resume reads."""
    from asyncrl.config import load_config
    from asyncrl.training.fingerprint import model_fingerprint

    shared, tokenizer, _ = tiny_policy
    model = copy.deepcopy(shared)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    run_dir = tmp_path / "runs" / "r"
    cfg = load_config(overrides=[f"run.out_dir={run_dir.parent}", "run.name=r", "trainer.steps=4"])
    save_checkpoint(run_dir, 3, model, tokenizer, {"optimizer": shard_entry(optimizer), "version": 3},
                    {"totals": {}}, write_shards=lambda into: save_shards(optimizer, into / SHARDS),
                    fingerprint=model_fingerprint(cfg, model, tokenizer))
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    return run_dir


def _metadata(run_dir: Path) -> Path:
    found = list((run_dir / "checkpoints").glob(f"step-*/{SHARDS}/{METADATA}"))
    assert len(found) == 1, found
    return found[0]


@pytest.fixture(scope="module")
def genuine_run(tmp_path_factory, tiny_policy) -> Path:
    """One sharded run built for the module; tests that change it change a copy (:func:`_copy`)."""
    return _sharded_run(tmp_path_factory.mktemp("genuine"), tiny_policy)


def _copy(run_dir: Path, tmp_path: Path) -> Path:
    """The run at ``tmp_path/runs/r`` (its paths are relative to the run, so a copy loads as it)."""
    return Path(shutil.copytree(run_dir, tmp_path / "runs" / "r", symlinks=True))


@pytest.fixture
def crafted_run(genuine_run, tmp_path):
    """(run directory, marker): the checkpoint's .metadata replaced by a pickle that makes the marker."""
    run_dir = _copy(genuine_run, tmp_path)
    marker = tmp_path / "MARKER"
    _metadata(run_dir).write_bytes(pickle.dumps(_CreatesMarker(marker)))
    return run_dir, marker


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ASYNCRL_CACHE": str(tmp_path / "cache")}
    return subprocess.run([sys.executable, "-m", "asyncrl.cli", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=240)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr[-3000:])
    return lines[0]


def test_export_refuses_a_crafted_metadata_in_one_line(crafted_run, tmp_path):
    run_dir, marker = crafted_run
    proc = _cli(tmp_path, "export", str(run_dir))
    assert not marker.exists(), "the crafted metadata was unpickled"
    line = _one_line(proc)
    assert str(_metadata(run_dir)) in line and "refusing to unpickle the global" in line, line
    assert not (run_dir / "hf").exists() and not list(run_dir.glob(".hf*"))


def test_resume_refuses_a_crafted_metadata_in_one_line(crafted_run, tmp_path):
    run_dir, marker = crafted_run
    proc = _cli(tmp_path, "train", "--resume", str(run_dir), "run.progress=false")
    assert not marker.exists(), "the crafted metadata was unpickled"
    line = _one_line(proc)
    assert "--resume: refusing to resume from checkpoint" in line, line
    assert METADATA in line and "refusing to unpickle the global" in line, line
    assert _metadata(run_dir).is_file()  # refused, not set aside as damaged with an older one used


def test_every_reader_of_the_shards_refuses_it(crafted_run):
    """The library calls behind export, resume, the ESS rollback and a world-1 optimizer load."""
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.distributed.dcp_reader import UnsafeCheckpoint
    from asyncrl.training.sharded_state import load_shards, tensor_names
    from asyncrl.training.checkpoint import check_checkpoint, latest_checkpoint, load_states
    from asyncrl.training.export import export_run
    from asyncrl.training.trainer import Learner

    run_dir, marker = crafted_run
    checkpoint = latest_checkpoint(run_dir)
    with pytest.raises(UnsafeCheckpoint, match="refusing to unpickle"):
        check_checkpoint(checkpoint)
    with pytest.raises(UnsafeCheckpoint):
        tensor_names(checkpoint / SHARDS)
    with pytest.raises(ValueError, match=r"^RUN_DIR: refusing .*refusing to unpickle the global"):
        export_run(run_dir)
    entry = load_states(checkpoint)[0]["optimizer"]
    model = torch.nn.Linear(2, 2)
    trainer = Learner(model, TrainerConfig(n_minibatches=1, lr=1e-3), LossConfig(name="decoupled"), seed=0)
    with pytest.raises(UnsafeCheckpoint):
        load_shards(trainer.optimizer, entry, distributed=False)
    assert not marker.exists()


def test_a_shard_path_outside_the_folder_is_refused(genuine_run, tmp_path):
    """Metadata built only of allowed classes, but naming a shard file by a path that leaves its
    folder: a load would read that file into the optimizer's state."""
    from asyncrl.distributed.dcp_reader import UnsafeCheckpoint, read_metadata_file
    from asyncrl.training.checkpoint import latest_checkpoint

    run_dir = _copy(genuine_run, tmp_path)
    path = _metadata(run_dir)
    metadata = read_metadata_file(path)
    for info in metadata.storage_data.values():
        info.relative_path = "../../../../elsewhere.distcp"
    path.write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnsafeCheckpoint, match="elsewhere.distcp.*not a file of its own folder"):
        read_metadata_file(path)
    from asyncrl.training.checkpoint import check_checkpoint

    with pytest.raises(UnsafeCheckpoint):
        check_checkpoint(latest_checkpoint(run_dir))


def test_genuine_shards_still_read_back(genuine_run):
    from asyncrl.training.sharded_state import read_tensor, tensor_names
    from asyncrl.training.checkpoint import check_checkpoint, latest_checkpoint

    checkpoint = latest_checkpoint(genuine_run)
    names = tensor_names(checkpoint / SHARDS)
    assert names and all(key.startswith("state.") for key in names)
    key, (size, dtype) = sorted(names.items())[0]
    assert read_tensor(checkpoint / SHARDS, key, size, dtype).shape == size
    check_checkpoint(checkpoint)


def test_a_crafted_checkpoint_as_model_path_runs_nothing(crafted_run):
    """``policy.model_path=<checkpoint>`` reads the Hugging Face files only (the shards are never
    opened), and a weights file that is a crafted pickle is refused by torch's weights_only loader."""
    from asyncrl.config import ConfigError, load_config
    from asyncrl.policy.model import load_policy_for
    from asyncrl.training.checkpoint import latest_checkpoint

    run_dir, marker = crafted_run
    checkpoint = latest_checkpoint(run_dir)
    cfg = load_config(overrides=[f"policy.model_path={checkpoint}"])
    model, _ = load_policy_for(cfg.policy, cfg.policy.model_path)
    assert sum(p.numel() for p in model.parameters()) > 0
    (checkpoint / "model.safetensors").unlink()
    (checkpoint / "pytorch_model.bin").write_bytes(pickle.dumps(_CreatesMarker(marker), protocol=2))
    with pytest.raises(ConfigError) as err:
        load_policy_for(cfg.policy, cfg.policy.model_path)
    assert "\n" not in str(err.value) and "policy.model_path" in str(err.value)
    assert not marker.exists()
    json.loads((checkpoint / "config.json").read_text())  # nothing in the folder was rewritten
