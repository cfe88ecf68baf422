import torch

from asyncrl.policy.logprobs import completion_logprobs
from asyncrl.policy.model import load_policy
from asyncrl.policy.sampling import decode, left_pad, prefill, to_generation
from asyncrl.policy.tokenizer import train_tokenizer
from asyncrl.rollout import EngineSpec, make_engine


def sample(model, tok, prompts, *, max_new_tokens, temperature, seed, version=0):
    engine = make_engine("transformers", EngineSpec(max_new_tokens=max_new_tokens, temperature=temperature,
                                                    seed=seed), model=model, tokenizer=tok)
    assert engine.model is model  # same device and dtype: the engine generates with the model itself
    engine.update_weights(model, version)
    return engine.generate(prompts)


def test_tokenizer_round_trip(tiny_policy):
    _, tok, task = tiny_policy
    for p in task.problems("eval")[:20]:
        text = p.prompt + p.solution
        ids = tok(text)["input_ids"]
        assert ids[0] == tok.bos_token_id
        assert tok.decode(ids, skip_special_tokens=True) == text
    # split_digits=True gives one token per digit
    digit_tok = train_tokenizer([p.prompt + p.solution for p in task.problems("train")], 400, split_digits=True)
    assert len(digit_tok("12345", add_special_tokens=False)["input_ids"]) == 5
    # unseen characters still encode (byte-level alphabet), no <unk>
    weird = "Zoë paid €7 — ok?"
    assert tok.decode(tok(weird, add_special_tokens=False)["input_ids"]) == weird


def test_save_and_load_as_hf_directory(tiny_policy, tmp_path):
    model, tok, task = tiny_policy
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    loaded, loaded_tok = load_policy(tmp_path)
    for p in task.problems("train")[:50]:  # the reloaded tokenizer is the same tokenizer
        text = p.prompt + p.solution
        assert loaded_tok(text)["input_ids"] == tok(text)["input_ids"]
    assert (loaded_tok.eos_token_id, loaded_tok.pad_token_id, loaded_tok.padding_side) == \
        (tok.eos_token_id, tok.pad_token_id, "left")
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values()):
        torch.testing.assert_close(a, b)


def _direct_logprobs(model, prompt, completion, temperature):
    """One sequence at a time, no padding, no cache: the reference computation."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0].float() / temperature
    logp_all = torch.log_softmax(logits, -1)
    return torch.stack([logp_all[len(prompt) - 1 + j, tok] for j, tok in enumerate(completion)])


def test_behavior_logprobs_match_direct_computation(tiny_policy):
    model, tok, task = tiny_policy
    problems = task.problems("train")[:6]
    prompts = [tok(p.prompt)["input_ids"] for p in problems]
    gen = sample(model, tok, prompts, max_new_tokens=12, temperature=0.7, version=3, seed=1)
    assert gen.completion_ids.shape[0] == 6
    assert set(gen.versions[gen.completion_mask].tolist()) == {3}
    assert (gen.versions[~gen.completion_mask] == -1).all()
    for i, prompt in enumerate(prompts):
        n = int(gen.completion_mask[i].sum())
        completion = gen.completion_ids[i, :n].tolist()
        with torch.no_grad():
            ref = _direct_logprobs(model, prompt, completion, 0.7)
        torch.testing.assert_close(gen.behav_logp[i, :n], ref, rtol=1e-4, atol=1e-4)


def test_trainer_logprobs_and_entropy_match_direct_computation(tiny_policy):
    model, tok, task = tiny_policy
    problems = task.problems("train")[:4]
    prompts = [tok(p.prompt)["input_ids"] for p in problems]
    gen = sample(model, tok, prompts, max_new_tokens=10, temperature=1.0, seed=2)
    logp, entropy = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                        gen.completion_mask, with_entropy=True)
    assert logp.requires_grad
    logp.sum().backward()  # differentiable
    assert any(p.grad is not None for p in model.parameters())
    model.zero_grad()
    with torch.no_grad():
        logp_ng, _ = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                         gen.completion_mask)
    assert not logp_ng.requires_grad
    for i, prompt in enumerate(prompts):
        n = int(gen.completion_mask[i].sum())
        completion = gen.completion_ids[i, :n].tolist()
        with torch.no_grad():
            ref = _direct_logprobs(model, prompt, completion, 1.0)
            ids = torch.tensor([prompt + completion])
            probs = torch.softmax(model(input_ids=ids).logits[0, len(prompt) - 1:-1].float(), -1)
            ref_entropy = -(probs * probs.log()).sum(-1)
        torch.testing.assert_close(logp_ng[i, :n], ref, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(entropy[i, :n].detach(), ref_entropy, rtol=1e-4, atol=1e-4)
        assert (logp_ng[i, n:] == 0).all()


def test_chunked_decode_with_reprefill_equals_one_pass(tiny_policy):
    """Decoding in chunks, re-running the prefix between them, gives the same greedy tokens."""
    model, tok, task = tiny_policy
    prompts = [tok(p.prompt)["input_ids"] for p in task.problems("train")[:3]]
    ids, mask = left_pad(prompts, tok.pad_token_id)
    kw = dict(temperature=0.0, eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    whole = to_generation(decode(model, prefill(model, ids, mask), 12, **kw))
    state = decode(model, prefill(model, ids, mask), 5, **kw)
    state = prefill(model, ids, mask, state.tokens, state.logps, state.versions, state.finished)
    chunked = to_generation(decode(model, state, 7, **kw))
    assert torch.equal(whole.completion_ids, chunked.completion_ids)
    torch.testing.assert_close(whole.behav_logp, chunked.behav_logp, rtol=1e-4, atol=1e-4)


def test_engine_hook_swaps_weights_between_chunks(tiny_policy):
    """A hook that loads other weights mid-generation: later tokens carry the new version and come
    from the new weights (the engine re-runs the prefix with them)."""
    import copy

    model, tok, task = tiny_policy
    own = copy.deepcopy(model)
    spec = EngineSpec(max_new_tokens=12, temperature=0.0, chunk_tokens=4)
    engine = make_engine("transformers", spec, model=own, tokenizer=tok)
    other = copy.deepcopy(model)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.05 * torch.randn_like(p))
    calls = []

    def hook() -> bool:
        calls.append(engine.version)
        if engine.version == 0:
            engine.update_weights(other, 1)
            return True
        return False

    prompts = [tok(p.prompt)["input_ids"] for p in task.problems("train")[:3]]
    gen = engine.generate(prompts, between_chunks=hook)
    mask = gen.completion_mask
    assert calls[0] == 0 and len(calls) >= 2
    assert (gen.versions[:, :4][mask[:, :4]] == 0).all() and (gen.versions[:, 4:][mask[:, 4:]] == 1).all()
    # the engine held its own copy: the hook changed it, not the model it was built from
    assert torch.equal(own.lm_head.weight, other.lm_head.weight)
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)
    n = int(mask[0].sum())
    with torch.no_grad():
        ref_new = _direct_logprobs(other, prompts[0], gen.completion_ids[0, :n].tolist(), 1.0)
        ref_old = _direct_logprobs(model, prompts[0], gen.completion_ids[0, :n].tolist(), 1.0)
    expected = torch.where(gen.versions[0, :n] == 1, ref_new, ref_old)
    torch.testing.assert_close(gen.behav_logp[0, :n], expected, rtol=1e-4, atol=1e-4)


def test_engine_copies_weights_in_generation_dtype(tiny_policy):
    model, tok, _ = tiny_policy
    engine = make_engine("transformers", EngineSpec(max_new_tokens=4, temperature=1.0, dtype="bfloat16"),
                         model=model, tokenizer=tok)
    assert engine.model is not model and next(engine.model.parameters()).dtype == torch.bfloat16
    engine.update_weights(model, 2)
    torch.testing.assert_close(engine.model.lm_head.weight.float(), model.lm_head.weight, rtol=1e-2, atol=1e-2)
    assert engine.version == 2


def test_decode_uses_the_installed_transformers_cache_argument(tiny_policy):
    # A deprecated KV-cache argument name makes transformers print to stderr in every worker,
    # which breaks the one-line error contract; decoding must use the name the model declares.
    import warnings

    model, tok, task = tiny_policy
    ids, mask = left_pad([tok(p.prompt)["input_ids"] for p in task.problems("eval")[:3]], tok.pad_token_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        state = decode(model, prefill(model, ids, mask), 4, temperature=0.0,
                       eos_id=tok.eos_token_id, pad_id=tok.pad_token_id)
    assert 1 <= state.n_generated <= 4
