"""The chunked LM-head path of ``completion_logprobs`` computes what the full-logits path computed:
log-probs, entropies and gradients equal to 1e-6 (fp32) against a copy of the full-logits
implementation, for every chunk size, left-padded prompts, masked completion tokens and a
temperature != 1; and no [.., V] tensor is kept for the backward pass."""

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from asyncrl.policy.logprobs import completion_logprobs, separable_head
from asyncrl.policy.sampling import positions

VOCAB = 1000
TEMPERATURE = 0.7
CHUNKS = [1, 7, 10**6]


def full_logits_reference(model, prompt_ids, prompt_mask, completion_ids, completion_mask, *, temperature=1.0):
    """The implementation before chunking, copied: logits at every position, log_softmax over them,
    entropy with its graph. Returns (logp [B, T], entropy [B, T])."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)
    attn = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    n = completion_ids.shape[1]
    logits = model(input_ids=ids, attention_mask=attn, position_ids=positions(attn)).logits
    logits = logits[:, -n - 1:-1].float() / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, completion_ids[..., None]).squeeze(-1)
    logp = torch.where(completion_mask, logp, torch.zeros_like(logp))
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, torch.where(completion_mask, entropy, torch.zeros_like(entropy))


def _qwen2(tie: bool = False, **extra):
    torch.manual_seed(0)
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tie,
                                        **extra))


def _llama():
    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=4, num_key_value_heads=2))


def _gpt2():
    torch.manual_seed(0)
    return GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                      embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))


def _lora():
    from asyncrl.config import PolicyConfig
    from asyncrl.policy.lora import apply_lora

    model = apply_lora(_qwen2(), PolicyConfig(lora_rank=4, lora_alpha=8.0))
    with torch.no_grad():  # non-zero adapters, so the LoRA path contributes to the result
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.1)
    return model


MODELS = {"qwen2": _qwen2, "llama": _llama, "gpt2": _gpt2, "lora": _lora}


def _inputs(vocab: int = VOCAB):
    """B=3 rows: left-padded prompts of lengths 3, 4, 5; completions with a masked tail, a masked
    middle token and a masked last token."""
    gen = torch.Generator().manual_seed(1)
    prompt_ids = torch.randint(0, vocab, (3, 5), generator=gen)
    prompt_mask = torch.ones(3, 5, dtype=torch.bool)
    prompt_mask[0, :2] = False
    prompt_mask[1, :1] = False
    completion_ids = torch.randint(0, vocab, (3, 6), generator=gen)
    completion_mask = torch.ones(3, 6, dtype=torch.bool)
    completion_mask[0, 4:] = False
    completion_mask[2, 2] = False
    completion_mask[1, 5] = False
    return prompt_ids, prompt_mask, completion_ids, completion_mask


def _weights(shape) -> torch.Tensor:
    """Fixed, distinct per-token loss weights (a loss whose gradient tests every position)."""
    return torch.arange(shape[0] * shape[1], dtype=torch.float32).reshape(shape).sin()


def _grads(model, loss) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def _assert_grads_close(got: dict, want: dict) -> None:
    """Each gradient to 1e-6 relative to its own largest entry (sums over tokens run in another
    order when chunked)."""
    assert got.keys() == want.keys() and want
    for name, value in want.items():
        torch.testing.assert_close(got[name], value, rtol=1e-6, atol=1e-6 * max(1.0, value.abs().max().item()),
                                   msg=name)


def _compare(model, inputs, chunk: int, *, entropy_grad: bool = False) -> None:
    w = _weights(inputs[2].shape)
    ref_logp, ref_entropy = full_logits_reference(model, *inputs, temperature=TEMPERATURE)
    ref_loss = (ref_logp * w).sum() + ((ref_entropy * w.flip(1)).sum() if entropy_grad else 0.0)
    want = _grads(model, ref_loss)
    logp, entropy = completion_logprobs(model, *inputs, temperature=TEMPERATURE, with_entropy=True,
                                        logits_chunk=chunk, entropy_grad=entropy_grad)
    torch.testing.assert_close(logp, ref_logp.detach(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(entropy, ref_entropy.detach(), rtol=1e-6, atol=1e-6)
    assert entropy.requires_grad == entropy_grad
    assert (logp[~inputs[3]] == 0).all() and (entropy[~inputs[3]] == 0).all()
    loss = (logp * w).sum() + ((entropy * w.flip(1)).sum() if entropy_grad else 0.0)
    _assert_grads_close(_grads(model, loss), want)


@pytest.mark.parametrize("chunk", CHUNKS)
@pytest.mark.parametrize("name", list(MODELS))
def test_chunked_equals_full_logits(name, chunk):
    model = MODELS[name]()
    assert separable_head(model) is not None  # the chunked path is the one under test
    _compare(model, _inputs(), chunk)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_repo_tiny_model(tiny_policy, chunk):
    model, tokenizer, _ = tiny_policy  # tied input/output embeddings
    model = copy.deepcopy(model)
    assert separable_head(model) is not None
    _compare(model, _inputs(len(tokenizer)), chunk)


@pytest.mark.parametrize("chunk", [1, 7])
def test_entropy_gradient_when_asked(chunk):
    _compare(_qwen2(tie=True), _inputs(), chunk, entropy_grad=True)


def test_logit_softcapping_falls_back_to_full_logits():
    """A model whose config transforms the logits after the head takes the model's own forward (here
    Qwen2 ignores the attribute, so the results still equal the reference's)."""
    model = _qwen2(final_logit_softcapping=30.0)
    assert separable_head(model) is None
    _compare(model, _inputs(), 7)


def test_no_vocabulary_sized_tensor_is_kept_for_backward():
    model, inputs = _qwen2(), _inputs()
    saved = []

    def keep_shape(tensor):
        saved.append(tuple(tensor.shape))
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(keep_shape, lambda t: t):
        completion_logprobs(model, *inputs, with_entropy=True, logits_chunk=4)
    assert saved and not [s for s in saved if s[-1] == VOCAB]  # logits [.., V] are recomputed, not kept
    saved.clear()
    with torch.autograd.graph.saved_tensors_hooks(keep_shape, lambda t: t):
        full_logits_reference(model, *inputs)
    assert [s for s in saved if s[-1] == VOCAB]  # the control: the full path keeps them


def test_lm_head_fp32_runs_the_head_in_fp32_under_autocast():
    model, inputs = _qwen2(), _inputs()
    backbone, head = separable_head(model)
    ids = torch.cat([inputs[0], inputs[2]], 1)
    attn = torch.cat([inputs[1].long(), inputs[3].long()], 1)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        hidden = backbone(input_ids=ids, attention_mask=attn, position_ids=positions(attn)).last_hidden_state
        fp32 = completion_logprobs(model, *inputs, temperature=TEMPERATURE, lm_head_fp32=True, logits_chunk=5)[0]
        bf16 = completion_logprobs(model, *inputs, temperature=TEMPERATURE, logits_chunk=5)[0]
        ref_bf16 = full_logits_reference(model, *inputs, temperature=TEMPERATURE)[0]
    logits = hidden[:, -7:-1].float() @ head.weight.float().T  # the head in fp32 on the same hidden states
    want = torch.log_softmax(logits / TEMPERATURE, -1).gather(-1, inputs[2][..., None]).squeeze(-1)
    mask = inputs[3]
    torch.testing.assert_close(fp32[mask], want[mask], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(bf16, ref_bf16, rtol=0.02, atol=0.05)  # the autocast head, as the model's own
    assert (bf16 - fp32)[mask].abs().max() > 1e-4  # the option does change the head's precision
