"""The transformers engine computes the logits of the last position only (prefill and decode), and
with ``lm_head_fp32`` runs the output head in float32: same completions as the full-logits code,
never a [B, L, V] logits tensor, and a float32 head whatever the weights' dtype or autocast."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from asyncrl.config import load_config
from asyncrl.core.loader import ConfigError
from asyncrl.policy import sampling
from asyncrl.policy.model import plain_copy
from asyncrl.policy.prompts import encode_problems
from asyncrl.policy.sampling import last_logits, left_pad, positions
from asyncrl.rollout.engine import EngineSpec, make_engine
from asyncrl.runtime.engines import rollout_engine
from asyncrl.runtime.validate import load_run_config


def _full_logits(model, *, lm_head_fp32=False, **inputs):
    """The code before: logits of every position [B, L, V], then the last one kept."""
    assert not lm_head_fp32
    out = model(**inputs)
    return out.logits[:, -1].float(), getattr(out, sampling.cache_field(model))


@pytest.fixture(scope="module")
def tied_qwen2(tiny_policy):
    """A tiny Qwen2 of another shape, input and output embeddings tied (as in Qwen2.5-0.5B)."""
    _, tokenizer, task = tiny_policy
    torch.manual_seed(1)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=1, intermediate_size=96, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    return Qwen2ForCausalLM(config).eval(), tokenizer, task


def _generate(model, tokenizer, task, **spec):
    engine = make_engine("transformers", EngineSpec(max_new_tokens=12, seed=3, **spec), model=model,
                         tokenizer=tokenizer)
    return engine.generate(encode_problems(tokenizer, task.problems("train")[:6], 2))


@pytest.mark.parametrize("which", ["tiny_policy", "tied_qwen2"])
@pytest.mark.parametrize("spec", [{"temperature": 1.0}, {"temperature": 0.0}, {"temperature": 0.8, "top_p": 0.9}],
                         ids=["sampled", "greedy", "top_p"])
def test_same_completions_as_with_every_position_s_logits(which, spec, request, monkeypatch):
    model, tokenizer, task = request.getfixturevalue(which)
    new = _generate(model, tokenizer, task, **spec)
    monkeypatch.setattr(sampling, "last_logits", _full_logits)
    old = _generate(model, tokenizer, task, **spec)
    assert torch.equal(new.completion_ids, old.completion_ids)
    assert torch.equal(new.versions, old.versions)
    # the head's matmul over B rows instead of B * L may round differently in the last bit
    torch.testing.assert_close(new.behav_logp, old.behav_logp, rtol=0, atol=1e-5)


@pytest.mark.parametrize("has_logits_to_keep", [True, False], ids=["logits_to_keep", "sliced-head-input"])
def test_the_head_never_sees_more_than_the_last_position(has_logits_to_keep, tiny_policy, monkeypatch):
    model, tokenizer, task = tiny_policy
    if not has_logits_to_keep:  # a model whose forward lacks logits_to_keep: the head's input is sliced
        monkeypatch.setattr(sampling, "_keeps_last_logits", lambda _cls: False)
    shapes = []
    hook = model.get_output_embeddings().register_forward_hook(lambda _m, _args, out: shapes.append(out.shape))
    try:
        gen = _generate(model, tokenizer, task, temperature=1.0)
    finally:
        hook.remove()
    assert gen.prompt_ids.shape[1] > 1 and len(shapes) > 1  # a real prefill, then decode steps
    batch = gen.prompt_ids.shape[0]
    assert all(shape == (batch, 1, len(tokenizer)) for shape in shapes), shapes


def _inputs(tokenizer, task):
    prompts = encode_problems(tokenizer, task.problems("train")[:3], 1)
    ids, mask = left_pad(prompts, tokenizer.pad_token_id)
    return {"input_ids": ids, "attention_mask": mask, "position_ids": positions(mask), "use_cache": True}


@pytest.mark.parametrize("autocast", [False, True], ids=["plain", "under-bf16-autocast"])
def test_lm_head_fp32_computes_the_head_in_float32(autocast, tiny_policy):
    model, tokenizer, task = tiny_policy
    half = plain_copy(model, "cpu", torch.bfloat16).eval()
    inputs = _inputs(tokenizer, task)
    with torch.no_grad():
        hidden = half.model(**{k: v for k, v in inputs.items() if k != "use_cache"}).last_hidden_state[:, -1:]
        expected = (hidden.float() @ half.lm_head.weight.float().T)[:, -1]
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            fp32, _ = last_logits(half, lm_head_fp32=True, **inputs)
            plain, _ = last_logits(half, **inputs)
    torch.testing.assert_close(fp32, expected, rtol=0, atol=1e-5)
    assert (plain - expected).abs().max() > 1e-3  # the bf16 head rounds its logits
    assert "forward" not in vars(half.lm_head)  # the float32 head is gone once the pass is over


def test_lm_head_fp32_changes_nothing_for_float32_weights(tiny_policy):
    model, tokenizer, task = tiny_policy
    with torch.no_grad():
        fp32, _ = last_logits(model, lm_head_fp32=True, **_inputs(tokenizer, task))
        plain, _ = last_logits(model, **_inputs(tokenizer, task))
    assert torch.equal(fp32, plain)


def test_lm_head_fp32_reaches_the_engine_and_is_refused_with_vllm(tiny_policy):
    model, tokenizer, _ = tiny_policy
    cfg = load_config(None, ["policy.lm_head_fp32=true"])
    engine = rollout_engine(cfg, model=model, tokenizer=tokenizer, policy_dir=None, seed=0, chunked=False)
    assert engine.spec.lm_head_fp32
    with pytest.raises(ConfigError, match=r"policy\.lm_head_fp32.*vllm"):
        load_run_config(None, ["policy.lm_head_fp32=true", "rollout.engine=vllm"])  # the engine's entry refuses it
    assert not load_config(None, ["rollout.engine=vllm"]).policy.lm_head_fp32
