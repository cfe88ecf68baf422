"""A checkpoint records what it fits (``fingerprint.json``: architecture, tokenizer, loss, LoRA) and
a resume into another model is refused in one line naming the difference, writing nothing; the
weights-only route (``policy.model_path=<checkpoint>``) stays open, and a checkpoint from before
fingerprints resumes with a warning. Sharded (several-rank) checkpoints carry it too."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch

from cli_forks import shared_forks
from test_bad_input import BASE, SMALL

from asyncrl.config import ModelConfig, load_config
from asyncrl.training.checkpoint import check_checkpoint, save_checkpoint
from asyncrl.training.fingerprint import (
    FINGERPRINT,
    difference,
    folder_fingerprint,
    model_fingerprint,
    read_fingerprint,
)

RUN = [*BASE, *SMALL, "run.progress=false", "run.checkpoint_every=1"]


def _train(tmp: Path, *args: str):
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "ASYNCRL_CACHE": str(tmp / "cache")}
    return shared_forks().run(["train", *args], tmp, env, timeout=240)


def _snapshot(root: Path) -> set[tuple]:
    return {(str(p.relative_to(root)), p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def four_layers(tmp_path_factory, tiny_policy) -> Path:
    """The tiny policy's shape with 4 layers instead of 2, same tokenizer, saved as a model folder."""
    from asyncrl.policy.model import build_tiny_model

    _, tokenizer, _ = tiny_policy
    model = build_tiny_model(ModelConfig(hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=2,
                                         intermediate_size=128), tokenizer, seed=0)
    path = tmp_path_factory.mktemp("four-layers")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_a_saved_model_and_its_folder_have_one_fingerprint(tmp_path, tiny_policy):
    """What a checkpoint records of the live model equals what a resume computes from the starting
    folder (reloaded config and tokenizer, the pad token set at load included): no false refusal."""
    from asyncrl.policy.model import load_policy

    model, tokenizer, _ = tiny_policy
    model.save_pretrained(tmp_path / "m")
    tokenizer.save_pretrained(tmp_path / "m")
    cfg = load_config(overrides=["loss.name=ppo"])
    saved = model_fingerprint(cfg, model, tokenizer)
    assert saved["model"]["num_hidden_layers"] == 2 and saved["settings"]["loss.name"] == "ppo"
    assert folder_fingerprint(cfg, tmp_path / "m") == saved
    reloaded_model, reloaded_tokenizer = load_policy(tmp_path / "m")
    assert model_fingerprint(cfg, reloaded_model, reloaded_tokenizer) == saved


def test_difference_names_the_first_field_that_differs(tiny_policy):
    model, tokenizer, _ = tiny_policy
    cfg = load_config(overrides=["loss.name=ppo"])
    saved = model_fingerprint(cfg, model, tokenizer)
    assert difference(saved, saved) is None
    deeper = json.loads(json.dumps(saved))
    deeper["model"]["num_hidden_layers"] = 4
    assert difference(saved, deeper) == "num_hidden_layers=2, this run has 4"
    other_loss = model_fingerprint(load_config(overrides=["loss.name=cispo"]), model, tokenizer)
    assert difference(saved, other_loss) == "loss.name=ppo, this run has cispo"
    lora = model_fingerprint(load_config(overrides=["loss.name=ppo", "policy.lora_rank=8"]), model, tokenizer)
    assert difference(saved, lora) == "policy.lora_rank=0, this run has 8"
    retokenized = {**saved, "tokenizer": "0123456789abcdef"}
    assert difference(saved, retokenized).startswith(f"another tokenizer (vocabulary digest {saved['tokenizer']})")
    # a field only one side knows (a newer transformers' config) is not compared
    newer = json.loads(json.dumps(saved))
    newer["model"]["head_dim"] = 16
    assert difference(saved, newer) is None


def test_a_sharded_checkpoint_records_its_fingerprint(tmp_path, tiny_policy):
    """The several-rank layout (optimizer shards in ``optimizer/``, written by torch.distributed.
    checkpoint; rank 0 writes the rest of the folder, the fingerprint included)."""
    from asyncrl.training.sharded_state import SHARDS, save_shards, shard_entry

    shared, tokenizer, _ = tiny_policy
    model = copy.deepcopy(shared)  # the session's model keeps its weights
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    made = model_fingerprint(load_config(), model, tokenizer)
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": shard_entry(optimizer), "version": 1}, {},
                             write_shards=lambda into: save_shards(optimizer, into / SHARDS), fingerprint=made)
    assert (folder / SHARDS / ".metadata").is_file() and read_fingerprint(folder) == made
    check_checkpoint(folder)


def test_resume_into_another_architecture_is_refused(tmp_path, model_dir, four_layers):
    """A 2-layer run's checkpoint put in a 4-layer run's directory: `--resume` refuses it in one
    line naming the layers (exit 2, the run directory untouched); the same checkpoint as
    ``policy.model_path`` of a new run trains."""
    four = _train(tmp_path, *RUN, f"policy.model_path={four_layers}", "run.name=four")
    two = _train(tmp_path, *RUN, f"policy.model_path={model_dir}", "run.name=two")
    assert four.returncode == 0 and two.returncode == 0, (four.stderr[-2000:], two.stderr[-2000:])
    runs = tmp_path / "runs"
    foreign = runs / "two" / "checkpoints" / "step-000001"
    assert read_fingerprint(foreign)["model"]["num_hidden_layers"] == 2
    target = runs / "four" / "checkpoints" / "step-000001"
    shutil.rmtree(target)
    shutil.copytree(foreign, target)
    (runs / "four" / "summary.json").unlink()
    before = _snapshot(runs / "four")

    refused = _train(tmp_path, "--resume", str(runs / "four"), "trainer.steps=2")
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.strip().splitlines() == [
        f"asyncrl: config error: --resume: checkpoint {target} was written for num_hidden_layers=2, this run "
        f"has 4; to start a new run from its weights deliberately use policy.model_path={target}"]
    assert _snapshot(runs / "four") == before

    fresh = _train(tmp_path, *RUN, f"policy.model_path={foreign}", "run.name=from-weights")
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert read_fingerprint(runs / "from-weights" / "checkpoint")["model"]["num_hidden_layers"] == 2


def test_a_checkpoint_without_fingerprint_resumes_with_a_warning(tmp_path, model_dir):
    first = _train(tmp_path, *RUN, f"policy.model_path={model_dir}", "run.name=old")
    assert first.returncode == 0, first.stderr[-2000:]
    run_dir = tmp_path / "runs" / "old"
    (run_dir / "checkpoints" / "step-000001" / FINGERPRINT).unlink()  # as written before fingerprints
    (run_dir / "summary.json").unlink()
    resumed = _train(tmp_path, "--resume", str(run_dir), "trainer.steps=2")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    warnings = [line for line in resumed.stderr.splitlines() if "fingerprint" in line]
    assert warnings == [f"asyncrl: checkpoint {run_dir}/checkpoints/step-000001 has no fingerprint.json (written "
                        "by an older asyncrl); resuming without checking that it fits this run"]
    assert read_fingerprint(run_dir / "checkpoints" / "step-000002") is not None
