import os

import pytest
import torch

# One torch thread per process (2 threads slow down many-fold when the other core is busy).
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_policy():
    """A randomly initialised 2-layer Qwen2 model + locally trained tokenizer (no download)."""
    from asyncrl.config import ModelConfig
    from asyncrl.policy.model import build_tiny_model
    from asyncrl.policy.tokenizer import train_tokenizer
    from asyncrl.tasks import ArithmeticConfig, ArithmeticTask

    task = ArithmeticTask(ArithmeticConfig(n_train=500, n_eval=50))
    tokenizer = train_tokenizer((p.prompt + p.solution for p in task.problems("train")), 400,
                                split_digits=False)
    model = build_tiny_model(ModelConfig(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
                                         intermediate_size=128), tokenizer, seed=0)
    return model, tokenizer, task
