"""`policy.model_path=<hub id>` resolves from the local Hugging Face hub cache, offline, once at config
load (docs/models.md): a fake cache in tmp (``models--org--name/snapshots/<hash>/`` with the tiny
saved model and its tokenizer, ``refs/main``) and ``HF_HUB_CACHE`` pointing at it. The CLI runs
forked from a server started with that environment (huggingface_hub reads HF_HUB_CACHE when it is
imported)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from cli_forks import CliForks  # tests/: the CLI forked from one imported copy

REPO_ID = "tiny-org/tiny-qwen"
REVISION = "0123456789abcdef0123456789abcdef01234567"
# one tiny sync step: the run only has to load the model by its hub id and train
SMALL = ["rollout.prompts_per_step=2", "rollout.samples_per_prompt=2", "rollout.max_new_tokens=8",
         "trainer.n_minibatches=1", "trainer.steps=1", "eval.n_problems=2", "eval.every=0", "run.mode=sync",
         "run.progress=false", "run.tensorboard=false"]


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory, tiny_policy) -> Path:
    """A hub cache holding REPO_ID at REVISION, as `hf download` lays it out."""
    model, tokenizer, _ = tiny_policy
    cache = tmp_path_factory.mktemp("hub")
    repo = cache / f"models--{REPO_ID.replace('/', '--')}"
    snapshot = repo / "snapshots" / REVISION
    model.save_pretrained(snapshot)
    tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)
    return cache


@pytest.fixture(scope="module")
def forks(hub_cache):
    server = CliForks({**os.environ, "HF_HUB_CACHE": str(hub_cache), "HF_HUB_OFFLINE": "1"})
    yield server
    server.close()


def test_config_resolves_a_hub_id_to_its_cached_snapshot(tmp_path, hub_cache, forks):
    proc = forks.run(["config", f"policy.model_path={REPO_ID}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout)
    assert printed["policy"]["model_path"] == str(hub_cache / "models--tiny-org--tiny-qwen" / "snapshots" / REVISION)


def test_train_by_hub_id_runs_from_the_cache(tmp_path, hub_cache, forks):
    proc = forks.run(["train", *SMALL, f"policy.model_path={REPO_ID}", "run.name=hub"], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "hub" / "summary.json").read_text())
    assert summary["steps"] == 1
    saved = yaml.safe_load((tmp_path / "runs" / "hub" / "config.yaml").read_text())
    assert saved["policy"]["model_path"].endswith(f"snapshots/{REVISION}")  # every process gets the folder


def test_a_hub_id_not_in_the_cache_is_one_line(tmp_path, hub_cache, forks):
    proc = forks.run(["train", "policy.model_path=tiny-org/absent"], tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert (f"policy.model_path: tiny-org/absent is not a local directory and not in the local Hugging Face "
            f"cache at {hub_cache}; nothing is downloaded at run time") in lines[0]
    assert "`hf download tiny-org/absent`" in lines[0]
    assert not (tmp_path / "runs").exists()


def test_plan_reads_the_cached_model_by_hub_id(tmp_path, forks, tiny_policy):
    proc = forks.run(["plan", "--model", REPO_ID, "--config", "sync", "policy.device=cuda"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    first = proc.stdout.splitlines()[0]  # the tiny policy's shape, read from the snapshot's config.json
    vocab = tiny_policy[0].config.vocab_size
    assert first.startswith(f"{REPO_ID}: ") and f"hidden 64, 2 layers, 4/2 heads, MLP 128, vocabulary {vocab}" in first


def test_tokenizer_files_per_class(tmp_path):
    """Without tokenizer.json, the vocabulary files transformers lists for the declared class."""
    from asyncrl.config.model_source import tokenizer_problem

    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "Qwen2Tokenizer"}))
    (tmp_path / "vocab.json").write_text("{}")
    assert "needs tokenizer.json or vocab.json + merges.txt (missing: merges.txt)" in tokenizer_problem(tmp_path)
    (tmp_path / "merges.txt").write_text("")
    assert tokenizer_problem(tmp_path) is None
    (tmp_path / "tokenizer_config.json").unlink()
    assert tokenizer_problem(tmp_path).startswith("no tokenizer files")
    (tmp_path / "tokenizer.json").write_text("{}")
    assert tokenizer_problem(tmp_path) is None
