"""``asyncrl plan``: the memory and time arithmetic by hand, the presets, the command, and the peak
memory estimate against measured trainer steps (CPU here; the H200 runs committed in
benchmarks/results/2026-11-26-gpu).

The CPU measurement is ``benchmarks/trainer_memory.py --baseline process`` in a fresh process: the
resident set's high-water mark during two trainer steps (each of two minibatch updates: AdamW's
state exists from the first update on) minus the resident set just before the model is built. So
it includes the parameters, gradients, AdamW state, saved activations, the LM head's chunk buffers
and every transient buffer of the step, and leaves out the process itself (interpreter, torch,
transformers). Before that baseline the script runs one trainer step of a throwaway 1-layer model
(code pages and one-time buffers of the first forward and backward pass are then resident already)
and fixes glibc's mmap threshold at 64 KiB, so freed tensors go back to the system and the resident
set follows the bytes allocated, as CUDA's ``max_memory_allocated`` does. Without those two, the
CPU peak also holds about 25 MiB of code pages and freed heap that glibc keeps for reuse (about
0.5x the activations at the tiny shape), neither of which a GPU's allocator would count.
"""

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from asyncrl.plan import estimate as plan
from asyncrl.cli import main
from asyncrl.plan.estimate import GIB, ModelShape, PlanInputs, Rates

ROOT = Path(__file__).resolve().parents[2]
TOLERANCE = 0.15  # the target for the peak-memory estimate

# 8 hidden, 2 layers, 2 heads of 4 (1 KV head), MLP 16, vocabulary 32, tied embeddings
SMALL = ModelShape("small", hidden=8, layers=2, heads=2, kv_heads=1, intermediate=16, vocab=32, tied=True)
SMALL_RUN = PlanInputs(model=SMALL, gpus=1, batch_rows=4, minibatches=2, micro_batch=0, prompt_tokens=2,
                       new_tokens=2, weight_dtype="float32", autocast=False, grad_ckpt=False, logits_chunk=3,
                       device="cpu", mode="sync", engine="transformers")


def test_small_config_by_hand():
    # parameters of a layer: q 8·8 + 8 = 72, k 8·4 + 4 = 36, v 36, o 8·8 = 64, MLP 3·8·16 = 384,
    # two norms 16: 608; two layers 1216; root: embeddings 32·8 (tied head) + final norm 8 = 264
    assert SMALL.layer_params == 608 and SMALL.root_params == 264 and SMALL.params == 1480
    assert SMALL_RUN.forward_rows() == (2, False)  # 4 rows / 2 minibatches, no micro-batches
    # float32, no autocast: 44h + 16I = 352 + 256 = 608 bytes per position per layer
    assert plan.layer_bytes_per_token(SMALL, 4, 4, False) == 608
    mem = plan.memory(SMALL_RUN)
    # activations of 2 rows × 4 positions = 8 positions: per layer 608·8 + float mask 2·4·4·4 B =
    # 4864 + 128 = 4992, two layers 9984; final norm (4 + 4)·8 + cos/sin 2·4·4 = 96 per position,
    # 768; the 2·2 completion hidden states 4·8·4 = 128: 9984 + 768 + 128 = 10880
    assert mem.lines["activations, no checkpointing"][0] == 10880
    # checkpointing: each layer's input 4·8·8 = 256 (two: 512) + the boolean mask 2·16 = 32 + one
    # recomputed layer 4992, and the same 768 + 128: 6432
    assert mem.lines["activations, checkpointing"][0] == 6432
    # LM head: chunk c = min(3, 2·2) = 3, c·V = 96, V·H = 256; float32 head: 4·256 (gradient
    # accumulator) + 4·96 (probabilities) + max(4·96 (log-probs), 4·256 (a chunk's [V, H] product))
    assert mem.lines["log-prob logits chunk"][0] == 1024 + 384 + 1024
    # parameters 4·1480 = 5920, gradients 5920, AdamW 11840; moments: backward start 10880 + 2432 =
    # 13312, backward end 5920 + the tied embedding's dense gradient 1024 = 6944, optimizer step
    # 5920 + 2 temporaries of the largest tensor 2·4·32·8 = 2048 → 7968
    assert (mem.lines["parameters"][0], mem.lines["gradients"][0], mem.lines["AdamW state"][0]) == (5920, 5920, 11840)
    assert mem.peak_moment == "backward start" and mem.peak == 5920 + 11840 + 13312
    assert mem.total == mem.peak  # CPU, sync: no channel, no rollout engine on a GPU


def test_small_config_on_two_ranks_by_hand():
    mem = plan.memory(replace(SMALL_RUN, gpus=2))
    # each rank: 1 row of the 2-row minibatch; activations 608·4 + 1·16·4 = 2496 per layer (4992) +
    # 96·4 + 4·8·1·2 = 5440; head chunk min(3, 2) = 2: 1024 + 4·64 + max(4·64, 1024) = 2304
    assert mem.rows == 1 and mem.lines["activations, no checkpointing"][0] == 5440
    assert mem.lines["log-prob logits chunk"][0] == 2304
    # FSDP whole on each rank: root 264·4 + two layers 2·608·4 + one layer's float32 gradient 608·4
    assert mem.lines["FSDP gathered root + layers"][0] == 1056 + 4864 + 2432
    # held: shard 2960 + AdamW 5920 + rank 0's replica in bf16 2·1480 = 2960; the largest moment is
    # the backward start, 5440 + the root 1056 + max(the head's 2304, the layers' 4864 + 2432) =
    # 13792 (one whole parameter gathered in float32, the 32 × 8 embedding: 1024, with the
    # gradients: 3984; the load before sharding: 5920 + 2960)
    assert mem.lines["generation replica"][0] == 2960 and mem.lines["largest parameter gathered"][0] == 1024
    assert mem.peak == 2960 + 5920 + 2960 + 13792 and mem.load == 5920 + 2960
    follower = plan.memory(replace(SMALL_RUN, gpus=2), rank=1)  # no replica, channel or engine
    assert "generation replica" not in follower.lines and follower.peak == mem.peak - 2960


def test_step_time_by_hand():
    rates = Rates(decode_tps=100, train_flops=1e6, bus_gbps=1e-6)
    t = plan.step_time(SMALL_RUN, rates)
    # generation 4 rows × 2 tokens / 100 = 0.08 s; training 6·1480·(4 × 4 positions) / 1e6 = 0.14208 s;
    # one rank and a sync run generating from its own weights: nothing to broadcast
    assert t.generation == pytest.approx(0.08) and t.training == pytest.approx(0.14208) and t.broadcast == 0
    assert t.step == pytest.approx(0.22208)
    # async, vLLM, 2 ranks: the gather brings half of the 5920 float32 bytes, and 1480·2 bf16 bytes
    # go to the engine: 5920 bytes at 1000 B/s; async overlaps generation with the rest
    two = replace(SMALL_RUN, gpus=2, mode="async", engine="vllm", device="cuda")
    t2 = plan.step_time(two, rates)
    assert t2.broadcast == pytest.approx(5.92) and t2.step == pytest.approx(t2.training + 5.92)


def test_presets_have_the_published_parameter_counts():
    counts = {size: shape.params for size, shape in plan.PRESETS.items()}
    assert counts == {"0.5B": 494_032_768, "1.5B": 1_543_714_304, "7B": 7_615_616_512, "32B": 32_763_876_352}
    assert plan.model_shape("qwen2.5-7b-instruct") == plan.PRESETS["7B"]


def test_model_from_a_config_json(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 16, "vocab_size": 32, "tie_word_embeddings": True}
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = plan.model_shape(str(tmp_path))
    assert shape.params == SMALL.params and shape.tied and shape.qkv_bias
    with pytest.raises(ValueError, match="--model: .*mixture-of-experts"):
        plan.shape_from_config({**config, "num_experts": 8}, "moe")
    with pytest.raises(ValueError, match="--model: .*intermediate_size"):
        plan.shape_from_config({k: v for k, v in config.items() if k != "intermediate_size"}, "x")


def test_inputs_from_the_gpu_recipe():
    from asyncrl.config import load_config

    cfg = load_config("gpu-gsm8k", ignore=("task", "reward"))  # the recipe's task.path is not needed
    inputs = plan.inputs_from_config(cfg, plan.PRESETS["1.5B"], 2, 256)
    assert (inputs.batch_rows, inputs.minibatches, inputs.new_tokens, inputs.gpu_mem_util) == (256, 8, 512, 0.35)
    assert inputs.autocast and inputs.grad_ckpt and inputs.engine == "vllm" and inputs.mode == "async"
    assert inputs.forward_rows() == (16, False)


def test_cli_plan_prints_memory_and_time(capsys):
    assert main(["plan", "--model", "1.5B", "--gpus", "2"]) == 0
    out = capsys.readouterr().out
    for line in ("parameters", "AdamW state", "activations, checkpointing", "log-prob logits chunk",
                 "generation replica", "rollout engine", "trainer peak", "GPU total", "generation", "weight broadcast",
                 "every GPU of the job", "trainer rank 0 ", "trainer rank 1 "):
        assert line in out, line
    mem = plan.memory(plan.inputs_from_config(_recipe(), plan.PRESETS["1.5B"], 2, 256))
    assert f"{mem.total / GIB:.2f}" in out


def test_cli_plan_table_markdown(capsys):
    assert main(["plan", "--table", "--markdown", "rollout.prompts_per_step=64"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| 7B")]
    assert len(rows) == 2 and rows[0].count("|") == 9  # memory and time, 7 GPU counts
    assert "✗" in rows[0]  # 7B does not fit on one 80 GiB GPU


@pytest.mark.parametrize("argv, names", [
    (["--model", "3B"], "--model: no preset or config.json '3B'"),
    (["--gpus", "0"], "--gpus: must be > 0"),
    (["--gpus", "64", "--trainer-gpus", "64"],
     "trainer.n_minibatches: each minibatch (32 rows) needs at least one row per trainer rank"),
    (["--decode-tps", "-1"], "--decode-tps: must be > 0"),
    (["trainer.logits_chunk=many"], "config error: trainer.logits_chunk"),
    (["--table", "--model", "7B"], "--model: --table plans"),
])
def test_cli_plan_bad_input_is_one_line(argv, names, capsys):
    assert main(["plan", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"asyncrl: {names}") and err.count("\n") == 1 and "Traceback" not in err


def _recipe():
    from asyncrl.config import load_config

    return load_config("gpu-gsm8k", ignore=("task", "reward"))


def measure_cpu_peak(tmp_path, shape: ModelShape, *, batch, seq, prompt, minibatches, chunk, ckpt=False,
                     micro=0) -> tuple[float, float]:
    """(measured MiB, estimated MiB) of trainer steps of ``shape`` (tied, float32) on the CPU."""
    out = tmp_path / "peak.json"
    args = [sys.executable, str(ROOT / "benchmarks" / "trainer_memory.py"), "--variant", "chunked",
            "--baseline", "process", "--steps", "1", "--threads", "1", "--vocab", str(shape.vocab),
            "--hidden", str(shape.hidden), "--intermediate", str(shape.intermediate), "--layers", str(shape.layers),
            "--heads", str(shape.heads), "--kv-heads", str(shape.kv_heads), "--batch", str(batch), "--seq", str(seq),
            "--prompt", str(prompt), "--minibatches", str(minibatches), "--logits-chunk", str(chunk),
            "--micro-batch", str(micro), "--out", str(out), *(["--grad-ckpt"] if ckpt else [])]
    done = subprocess.run(args, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    measured = json.loads(done.stdout.strip().splitlines()[-1])["peak_mib"]
    # every completion is at least 3/4 of its positions long there: choose chunk <= 3/4 of a pass's
    # completion positions, so the chunk is full, as the estimate assumes
    assert chunk <= 3 * (batch // minibatches) * (seq - prompt) // 4
    inputs = PlanInputs(model=shape, batch_rows=batch, minibatches=minibatches, micro_batch=micro,
                        prompt_tokens=prompt, new_tokens=seq - prompt, weight_dtype="float32", autocast=False,
                        grad_ckpt=ckpt, logits_chunk=chunk, device="cpu", mode="sync", engine="transformers")
    return measured, plan.memory(inputs).peak / 2**20


# the shape of the tests' tiny model (conftest.tiny_policy: its tokenizer has 400 tokens)
TINY = ModelShape("tiny", hidden=64, layers=2, heads=4, kv_heads=2, intermediate=128, vocab=400, tied=True)


@pytest.mark.parametrize("ckpt", [False, True], ids=["plain", "checkpointing"])
def test_peak_estimate_matches_a_measured_cpu_step_tiny_model(tmp_path, ckpt):
    """2 minibatches of 32 rows × 256 positions: 2026-11-26, measured 105.6 / 63.3 MiB against the
    estimates 103.1 / 63.1 MiB (the activations dominate: 99 MiB, 59 with checkpointing)."""
    measured, estimate = measure_cpu_peak(tmp_path, TINY, batch=64, seq=256, prompt=32, minibatches=2,
                                          chunk=1024, ckpt=ckpt)
    assert abs(estimate - measured) <= TOLERANCE * measured, (measured, estimate)


# ~50M parameters, Qwen2-shaped, with the Qwen vocabulary (39M of them are the tied embeddings)
QWEN_50M = ModelShape("qwen2-47m", hidden=256, layers=8, heads=4, kv_heads=2, intermediate=1024, vocab=151936,
                      tied=True)


@pytest.mark.slow
@pytest.mark.parametrize("micro", [0, 2], ids=["whole-minibatch", "micro-batches"])
def test_peak_estimate_matches_a_measured_cpu_step_50m_model(tmp_path, micro):
    """46.8M parameters, 2 minibatches of 4 rows × 256 positions, LM-head chunk 512 (~25 s each on
    2 busy cores): 2026-11-26, measured 1510.7 / 1395.4 MiB against the estimates 1504.3 / 1420.8
    (here the LM head's chunk, 742 MiB, and the weights with AdamW, 714 MiB, dominate)."""
    assert 45e6 < QWEN_50M.params < 55e6
    measured, estimate = measure_cpu_peak(tmp_path, QWEN_50M, batch=8, seq=256, prompt=64, minibatches=2,
                                          chunk=512, micro=micro)
    assert abs(estimate - measured) <= TOLERANCE * measured, (measured, estimate)


H200_RUNS = ROOT / "benchmarks" / "results" / "2026-11-26-gpu"


@pytest.mark.parametrize("name", ["trainer_memory_0.5B_run1.json", "trainer_memory_1.5B.json",
                                  "trainer_memory_1.5B_chunk4096.json", "trainer_memory_1.5B_micro1_chunk256.json"])
def test_peak_estimate_matches_the_h200_runs(name):
    """The chunked rows measured on an H200 (bf16 autocast over float32 weights, no checkpointing):
    peak ``max_memory_allocated`` above what was allocated before the step, i.e. without the
    parameters. Estimates are within 3 % of them (0.974, 1.006, 1.013, 0.999)."""
    run = json.loads((H200_RUNS / name).read_text())
    s = run["settings"]
    shape = ModelShape(name, s["hidden"], s["layers"], s["heads"], s["kv_heads"], s["intermediate"], s["vocab"],
                       tied=True)
    inputs = PlanInputs(model=shape, batch_rows=s["batch"], minibatches=s["minibatches"], micro_batch=s["micro_batch"],
                        prompt_tokens=s["prompt"], new_tokens=s["seq"] - s["prompt"], weight_dtype=s["dtype"],
                        autocast=s["autocast"] == "bfloat16", grad_ckpt=s["grad_ckpt"],
                        logits_chunk=s["logits_chunk"], device="cuda", mode="sync", engine="transformers")
    mem = plan.memory(inputs)
    estimate = (mem.peak - mem.lines["parameters"][0]) / 2**20
    measured = next(row["peak_mib"] for row in run["rows"] if row["variant"] == "chunked")
    assert abs(estimate - measured) <= TOLERANCE * measured, (measured, estimate)
