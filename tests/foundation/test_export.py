"""``asyncrl export RUN_DIR``: the newest checkpoint as a Hugging Face folder that loads on its own
(same weights, no resume state), written atomically; bad input is one line and exit 2."""

import json
import subprocess
import sys

import torch
from safetensors.torch import load_file

from asyncrl.training.checkpoint import save_checkpoint


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "asyncrl.cli", "export", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_export_writes_the_newest_checkpoint_as_a_loadable_folder(tmp_path, tiny_policy):
    from transformers import AutoModelForCausalLM

    model, tokenizer, _ = tiny_policy
    run_dir = tmp_path / "runs" / "r"
    state = {"optimizer": {}, "version": 3, "rng": torch.Generator().get_state()}
    save_checkpoint(run_dir, 2, model, tokenizer, state, {"totals": {}})
    with torch.no_grad():
        next(model.parameters()).add_(1.0)  # the newest checkpoint differs from the older one
        newest = {k: v.clone() for k, v in model.state_dict().items()}
    save_checkpoint(run_dir, 4, model, tokenizer, state, {"totals": {}})
    with torch.no_grad():
        next(model.parameters()).sub_(1.0)
    out = _cli(str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"export": str(run_dir / "hf"), "step": 4}
    folder = run_dir / "hf"
    assert not (folder / "trainer_state.pt").exists() and not (folder / "run_state.pt").exists()
    saved = load_file(folder / "model.safetensors")
    loaded = AutoModelForCausalLM.from_pretrained(folder)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, newest[name]), name
    assert set(saved) <= set(newest)
    assert not list(tmp_path.rglob(".hf.tmp"))


def test_export_refusals_are_one_line(tmp_path, tiny_policy):
    model, tokenizer, _ = tiny_policy
    (tmp_path / "empty").mkdir()
    run_dir = tmp_path / "r"
    save_checkpoint(run_dir, 1, model, tokenizer, {"optimizer": {}, "version": 1}, {"totals": {}})
    (tmp_path / "taken").mkdir()
    for args, words in [((str(tmp_path / "nowhere"),), "is not a directory"),
                        ((str(tmp_path / "empty"),), "has no complete checkpoint"),
                        ((str(run_dir), "--out", str(tmp_path / "taken")), "exists; name a new folder")]:
        out = _cli(*args, cwd=tmp_path)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and words in lines[0], out.stderr


def test_export_of_a_sharded_checkpoint_leaves_the_optimizer_shards_out(tmp_path, tiny_policy):
    """Several trainer ranks write the optimizer state as torch.distributed.checkpoint shards in
    ``optimizer/``: resume state, like ``trainer_state.pt``, so the export has none of it."""
    import copy

    from asyncrl.config import load_config
    from asyncrl.training.sharded_state import SHARDS, save_shards, shard_entry
    from asyncrl.training.fingerprint import FINGERPRINT, model_fingerprint

    shared, tokenizer, _ = tiny_policy
    model = copy.deepcopy(shared)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
    optimizer.step()
    run_dir = tmp_path / "runs" / "r"
    folder = save_checkpoint(run_dir, 3, model, tokenizer, {"optimizer": shard_entry(optimizer), "version": 3},
                             {"totals": {}}, write_shards=lambda into: save_shards(optimizer, into / SHARDS),
                             fingerprint=model_fingerprint(load_config(), model, tokenizer))
    assert list((folder / SHARDS).glob("*.distcp")) and (folder / FINGERPRINT).is_file()
    out = _cli(str(run_dir), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    exported = run_dir / "hf"
    assert not (exported / SHARDS).exists() and not list(exported.rglob("*.distcp"))
    assert not (exported / FINGERPRINT).exists() and not (exported / "trainer_state.pt").exists()
    assert (exported / "model.safetensors").is_file() and (exported / "config.json").is_file()
