"""LoRA through peft: trainable adapters only, merged weights equal the peft model, end-to-end
training (sync and async) with a checkpoint that plain transformers loads."""

import json
import sys
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")

from asyncrl.config import ConfigError, PolicyConfig, load_config  # noqa: E402
from asyncrl.policy.lora import apply_lora, export_state_dict, merged_state_dict  # noqa: E402

def _lora_cfg(**kw) -> PolicyConfig:
    return PolicyConfig(lora_rank=4, lora_alpha=8.0, lora_target_modules=["q_proj", "k_proj", "v_proj",
                                                                            "o_proj"], **kw)


def _fresh(tiny_policy):
    import copy

    model, tokenizer, task = tiny_policy
    return copy.deepcopy(model), tokenizer, task


def _randomize_lora(model, seed=0):
    """LoRA B starts at zero (merged == base): give the adapters non-trivial values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def _batch(tokenizer, task, n=6):
    from asyncrl.policy.prompts import encode_prompt
    from asyncrl.policy.sampling import left_pad, positions

    texts = [p.prompt + p.solution for p in task.problems("train")[:n]]
    ids, mask = left_pad([encode_prompt(tokenizer, t, False) for t in texts], tokenizer.pad_token_id)
    return dict(input_ids=ids, attention_mask=mask, position_ids=positions(mask))


@pytest.mark.parametrize("checkpointing", [False, True])
def test_only_lora_params_get_grads(tiny_policy, checkpointing):
    model, tokenizer, task = _fresh(tiny_policy)
    if checkpointing:
        model.gradient_checkpointing_enable()
    lora = apply_lora(model, _lora_cfg())
    lora.train()
    trainable = {n for n, p in lora.named_parameters() if p.requires_grad}
    assert trainable and all("lora_A" in n or "lora_B" in n for n in trainable)
    _randomize_lora(lora)
    out = lora(**_batch(tokenizer, task)).logits.float().logsumexp(-1).mean()
    out.backward()
    for name, p in lora.named_parameters():
        if name in trainable:
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
        else:
            assert p.grad is None, name


def test_lora_off_is_identity(tiny_policy):
    model, _, _ = _fresh(tiny_policy)
    assert apply_lora(model, PolicyConfig()) is model
    assert export_state_dict(model).keys() == model.state_dict().keys()


def test_merged_weights_match_peft_outputs(tiny_policy):
    from transformers import AutoModelForCausalLM

    model, tokenizer, task = _fresh(tiny_policy)
    plain = AutoModelForCausalLM.from_config(model.config)  # the architecture a worker holds
    lora = apply_lora(model, _lora_cfg())
    _randomize_lora(lora)
    before = {k: v.clone() for k, v in lora.state_dict().items()}
    merged = merged_state_dict(lora)
    assert merged.keys() == plain.state_dict().keys()
    assert all(merged[k].shape == v.shape for k, v in plain.state_dict().items())
    plain.load_state_dict(merged)
    # the trained model is not mutated by the merge
    assert all(torch.equal(before[k], v) for k, v in lora.state_dict().items())
    batch = _batch(tokenizer, task)
    lora.eval(), plain.eval()
    with torch.no_grad():
        expected, got = lora(**batch).logits, plain(**batch).logits
        base = lora.get_base_model()
        with lora.disable_adapter():
            unadapted = base(**batch).logits
    assert (expected - unadapted).abs().max() > 1e-3, "adapters have no effect: test is vacuous"
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_shared_weights_publish_merged(tiny_policy):
    import multiprocessing as mp

    from transformers import AutoModelForCausalLM

    from asyncrl.runtime.channels import open_channel
    from asyncrl.runtime.channels.flat import tied_names

    model, tokenizer, task = _fresh(tiny_policy)
    worker = AutoModelForCausalLM.from_config(model.config)
    lora = apply_lora(model, _lora_cfg())
    shared = open_channel("shm", lora, ctx=mp.get_context("spawn"))
    assert shared.latest() == 0
    tied = tied_names(worker.state_dict())  # a tied LM head travels once, under the embedding's name
    assert tied and [n for n, _ in shared.layout] == [n for n in worker.state_dict() if n not in tied]
    _randomize_lora(lora, seed=1)
    shared.publish(lora, 3)
    assert shared.pull(worker) == 3
    batch = _batch(tokenizer, task)
    lora.eval(), worker.eval()
    with torch.no_grad():
        torch.testing.assert_close(worker(**batch).logits, lora(**batch).logits, atol=1e-5, rtol=1e-5)


def test_checkpoint_saves_merged_hf_model(tiny_policy, tmp_path):
    from transformers import AutoModelForCausalLM

    from asyncrl.training.checkpoint import save_checkpoint

    model, tokenizer, task = _fresh(tiny_policy)
    lora = apply_lora(model, _lora_cfg())
    _randomize_lora(lora, seed=2)
    ckpt = save_checkpoint(tmp_path / "run", 1, lora, tokenizer, {"version": 1}, {})
    assert not (ckpt / "adapter_config.json").exists()
    assert (ckpt / "lora_adapter" / "adapter_config.json").is_file()
    loaded = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    assert not any("lora" in k for k in loaded.state_dict())
    batch = _batch(tokenizer, task)
    lora.eval()
    with torch.no_grad():
        torch.testing.assert_close(loaded(**batch).logits, lora(**batch).logits, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("field, value", [("lora_rank", -1), ("lora_alpha", 0), ("lora_dropout", 1.0),
                                          ("lora_target_modules", [])])
def test_lora_config_validation(field, value):
    with pytest.raises(ConfigError, match=f"policy.{field}"):
        load_config(overrides=[f"policy.{field}={json.dumps(value)}"])


def test_lora_config_loads():
    cfg = load_config(overrides=["policy.lora_rank=8", "policy.lora_target_modules=[q_proj,v_proj]"])
    assert cfg.policy.lora_rank == 8 and cfg.policy.lora_target_modules == ["q_proj", "v_proj"]


def test_missing_peft_is_one_line_config_error(tiny_policy, monkeypatch):
    model, _, _ = _fresh(tiny_policy)
    monkeypatch.setitem(sys.modules, "peft", None)  # import peft → ImportError
    with pytest.raises(ConfigError, match=r'policy.lora_rank: .*asyncrl\[lora\]') as err:
        apply_lora(model, _lora_cfg())
    assert "\n" not in str(err.value)


# -- end to end -------------------------------------------------------------------------------

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "foundation"))
from test_e2e_train import TINY as E2E_TINY, run_cli  # noqa: E402

# the tiny, fast warm start of the e2e tests; mode, steps, lr and eval cadence are set per test here
TINY = [o for o in E2E_TINY if not o.startswith(("trainer.steps=", "trainer.lr=", "eval.every=", "run.mode="))]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_lora_train_end_to_end(tmp_path, cache, mode):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    proc = run_cli(tmp_path, "train", *TINY, f"run.mode={mode}", "trainer.steps=2", "eval.every=0",
                   "policy.lora_rank=4", "policy.lora_alpha=8", "trainer.lr=0.01",
                   f"policy.cache_dir={cache}", "run.name=lora", "run.out_dir=runs")
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "runs" / "lora"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["mode"] == mode
    ckpt = run_dir / "checkpoint"
    model = AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)
    from asyncrl.config import load_config
    from asyncrl.training.pretrain import pretrained_dir

    start_dir = pretrained_dir(load_config(str(run_dir / "config.yaml")))  # the run's own warm start
    before, after = load_file(start_dir / "model.safetensors"), load_file(ckpt / "model.safetensors")
    assert before.keys() == after.keys() and not any("lora" in k for k in after)
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(any(m in k for m in ("q_proj", "v_proj")) for k in changed), changed
    assert (ckpt / "lora_adapter" / "adapter_config.json").is_file()
    del model
