"""Every tensor that enters a run is checked where it enters, one line naming the file (or channel)
instead of NaN weights and a sampler's traceback steps later: a checkpoint's optimizer state
(``trainer_state.pt``, and the shards of several ranks) with NaN or a negative Adam second moment,
the cached warm start, the weights a rollout worker pulls, and the ESS rollback's checkpoint."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_forks import shared_forks
from test_bad_input import BASE, SMALL

import asyncrl.core.finite as finite
from asyncrl.config import ConfigError, load_config
from asyncrl.core.finite import BadTensor, first_bad_in, first_bad_tensor, first_bad_value
from asyncrl.training.checkpoint import NonFiniteCheckpoint, check_checkpoint, save_checkpoint

RUN = [*BASE, *SMALL, "run.progress=false"]


def _cli(tmp: Path, args: list[str], prelude: str = ""):
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "ASYNCRL_CACHE": str(tmp / "cache")}
    return shared_forks().run(args, tmp, env, prelude, timeout=240)


def _one_line(proc, expected: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-3000:])
    lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and expected in lines[0], proc.stderr[-3000:]


def _trained_optimizer(model) -> torch.optim.AdamW:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return optimizer


# -- the checks themselves --

def test_bad_values_are_found_and_named(monkeypatch):
    monkeypatch.setattr(finite, "_CHUNK", 7)  # the value sits in a later chunk
    values = torch.zeros(20)
    assert first_bad_value("w", values) is None
    values[15] = math.inf
    assert first_bad_value("w", values) == "w holds inf"
    assert first_bad_value("ids", torch.arange(5)) is None  # integers hold no NaN
    moments = torch.ones(20)
    moments[9] = -0.5
    assert first_bad_value("state.0.exp_avg", moments) is None  # a first moment may be negative
    assert first_bad_value("state.0.exp_avg_sq", moments) == ("state.0.exp_avg_sq holds -0.5; a second moment "
                                                            "is never negative")
    nested = {"state": {0: {"step": torch.tensor(3.0), "exp_avg": torch.tensor([1.0, math.nan])}}}
    assert first_bad_in(nested, "optimizer") == "optimizer.state.0.exp_avg holds nan"


def test_the_norm_screen_finds_non_finite_weights_only():
    weights = {"a": torch.ones(4, 4), "b": torch.full((3,), 1e30), "c": torch.arange(4)}
    assert first_bad_tensor(weights.items()) is None  # b's norm overflows, its values are finite
    weights["b"][1] = -math.inf
    assert first_bad_tensor(weights.items()) == "b holds -inf"


# -- checkpoint optimizer state --

def test_a_negative_second_moment_refuses_the_checkpoint(tmp_path, tiny_policy):
    """Finite, but AdamW's first update divides by its square root: NaN weights."""
    model, tokenizer, _ = tiny_policy
    optimizer = _trained_optimizer(copy.deepcopy(model))
    state = optimizer.state_dict()
    state["state"][0]["exp_avg_sq"].view(-1)[0] = -1.0
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": state, "version": 1}, {})
    with pytest.raises(NonFiniteCheckpoint) as err:
        check_checkpoint(folder)
    assert str(err.value) == ("trainer_state.pt: optimizer.state.0.exp_avg_sq holds -1.0; a second moment is "
                              "never negative")
    assert err.value.what == "an impossible optimizer state"


def test_non_finite_optimizer_shards_are_refused_where_they_load(tmp_path, tiny_policy):
    """The several-rank layout (torch.distributed.checkpoint files): the resume's check of every
    shard, and the load itself (the ESS rollback and every other rank read the files again)."""
    from asyncrl.training.sharded_state import SHARDS, load_shards, save_shards, shard_entry
    from asyncrl.training.checkpoint import _non_finite_shards, load_states

    model, tokenizer, _ = tiny_policy
    trained = copy.deepcopy(model)
    optimizer = _trained_optimizer(trained)
    next(iter(optimizer.state.values()))["exp_avg"].view(-1)[2] = math.nan
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": shard_entry(optimizer), "version": 1}, {},
                             write_shards=lambda into: save_shards(optimizer, into / SHARDS))
    assert _non_finite_shards(folder / SHARDS) == f"{SHARDS}/state.0.exp_avg holds nan"
    with pytest.raises(NonFiniteCheckpoint, match=f"^trainer_state.pt: {SHARDS}/state.0.exp_avg holds nan$"):
        check_checkpoint(folder)
    fresh = torch.optim.AdamW(copy.deepcopy(model).parameters(), lr=1e-3)
    with pytest.raises(BadTensor) as err:
        load_shards(fresh, load_states(folder)[0]["optimizer"], distributed=False)
    assert str(err.value) == (f"optimizer shards {folder / SHARDS} hold a value the optimizer state cannot hold "
                              "(state.0.exp_avg holds nan); refusing to load them")
    assert not fresh.state  # nothing was taken


@pytest.fixture(scope="module")
def base_run(tmp_path_factory, model_dir) -> Path:
    """A finished 2-step sync run with a checkpoint at each step (copied by the tests that damage it)."""
    tmp = tmp_path_factory.mktemp("base")
    proc = _cli(tmp, ["train", *RUN, f"policy.model_path={model_dir}", "run.name=base", "trainer.steps=2",
                      "run.checkpoint_every=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    (tmp / "runs" / "base" / "summary.json").unlink()
    return tmp / "runs" / "base"


def test_resume_with_a_corrupted_second_moment_is_one_line(tmp_path, base_run):
    """The issue's case: before the check, the first step's update made every weight NaN and the
    sampler ended the run in a traceback."""
    run_dir = tmp_path / "runs" / "base"
    shutil.copytree(base_run, run_dir, symlinks=True)
    path = run_dir / "checkpoints" / "step-000002" / "trainer_state.pt"
    state = torch.load(path, weights_only=True)
    state["optimizer"]["state"][3]["exp_avg_sq"].view(-1)[:10] = -1.0
    torch.save(state, path)
    proc = _cli(tmp_path, ["train", "--resume", str(run_dir), "trainer.steps=3"])
    _one_line(proc, f"checkpoint {run_dir}/checkpoints/step-000002 holds an impossible optimizer state "
                    "(trainer_state.pt: optimizer.state.3.exp_avg_sq holds -1.0; a second moment is never negative)")
    assert "Traceback" not in proc.stderr
    assert not (run_dir / "checkpoints" / "step-000003").exists()


# -- the cached warm start --

def _cached_warm_start(cache: Path, tiny_policy, overrides: list[str]) -> Path:
    """A complete cache entry for ``overrides``, made by hand (no minutes of pretraining)."""
    from asyncrl.training.pretrain import pretrained_dir

    model, tokenizer, _ = tiny_policy
    out = pretrained_dir(load_config(overrides=[*overrides, f"policy.cache_dir={cache}"]))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    (out / "pretrain_summary.json").write_text(json.dumps({"steps": 0}))
    return out


def test_a_damaged_cached_warm_start_is_one_line(tmp_path, tiny_policy):
    """A NaN in the cached weights (or a torn file) names the file and says to delete the folder;
    the run is refused before its run directory exists."""
    from asyncrl.training.pretrain import warm_start

    overrides = [*SMALL, "pretrain.steps=3"]
    out = _cached_warm_start(tmp_path / "cache", tiny_policy, overrides)
    cfg = load_config(overrides=[*overrides, f"policy.cache_dir={tmp_path / 'cache'}"])
    assert warm_start(cfg) == out  # intact: used as it is
    weights = load_file(out / "model.safetensors")
    weights["model.norm.weight"][3] = math.nan
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    expected = (f"the cached warm start {out}/model.safetensors is damaged (model.norm.weight holds nan); "
                f"delete {out} and the next run builds it again")
    with pytest.raises(BadTensor) as err:
        warm_start(cfg)
    assert str(err.value) == expected
    proc = _cli(tmp_path, ["train", *BASE, *overrides, "run.progress=false", f"policy.cache_dir={tmp_path / 'cache'}"])
    _one_line(proc, expected)
    assert not (tmp_path / "runs").exists()
    data = (out / "model.safetensors").read_bytes()
    (out / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(BadTensor, match=f"^the cached warm start {out}/model.safetensors is damaged \\(\\w+"):
        warm_start(cfg)


# -- weights a rollout worker receives --

# the trainer's shared-memory channel writes a NaN into the weights it publishes from version 2 on
# (past the tied embedding, which a later copy of lm_head would overwrite); the trainer's own stay finite
CORRUPTING_CHANNEL = '''
import math
from asyncrl.runtime.channels import flat
_publish = flat.HostSharedWeights.publish
def _corrupting(self, model, version):
    _publish(self, model, version)
    if version >= 2:
        self.flat[(self.seq.value // 2) % 2, self.flat.shape[1] // 2] = math.nan
flat.HostSharedWeights.publish = _corrupting
'''


def test_non_finite_weights_from_the_channel_end_the_run_in_one_line(tmp_path, model_dir):
    proc = _cli(tmp_path, ["train", *RUN, f"policy.model_path={model_dir}", "run.name=channel", "run.mode=async",
                           "trainer.steps=4"], prelude=CORRUPTING_CHANNEL)
    _one_line(proc, "rollout worker 0 received non-finite weights through the shm weight channel (version 2: "
                    "model.layers.")
    assert "holds nan)" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs" / "channel" / "summary.json").exists()


# -- the ESS rollback --

def test_the_ess_rollback_checks_its_checkpoint(tmp_path, tiny_policy):
    from asyncrl.runtime.ess_check import EssCheck

    model, tokenizer, _ = tiny_policy
    folder = save_checkpoint(tmp_path, 1, model, tokenizer, {"optimizer": {}, "version": 1}, {})
    weights = load_file(folder / "model.safetensors")
    weights["model.norm.weight"][0] = math.inf
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    target = copy.deepcopy(model)
    before = {k: v.clone() for k, v in target.state_dict().items()}
    session = SimpleNamespace(cfg=load_config(), run_dir=tmp_path, model=target, progress=None)
    check = EssCheck(session)
    check.monitor.first_low_step = lambda step: step
    with pytest.raises(ConfigError, match=rf"^config error: trainer.ess_warning: ESS rollback: checkpoint {folder} "
                                          r"cannot be loaded \(model.safetensors: model.norm.weight holds inf\)$"):
        check.roll_back(5, trainer=None, source=None)
    assert all(torch.equal(v, before[k]) for k, v in target.state_dict().items())
