"""The evaluation before training, reused across runs that start from the same place.

Benchmark suites run many cells from one warm start and one seed; their step-0 evaluations are the
same computation (evaluation samples from its own generator, seeded by ``run.seed``, so skipping it
changes nothing else in the run). With ``eval.cache_initial`` the first run stores its step-0
metrics under ``initial-eval/<key>.json`` in the cache (:mod:`asyncrl.core.cache`) and the others
read them back.

The key hashes everything the result depends on: the starting weights themselves (not their path),
the evaluation problems (prompts and answers), and the settings of evaluation, task, reward
functions, generation length, chat template, dtype, device and seed. Any change is a new key, so a
stale entry is never read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import torch

from asyncrl.config import Config
from asyncrl.training.evaluation import eval_autocast_dtype
from asyncrl.core.cache import cache_root

# eval settings that do not change what the step-0 evaluation returns
_EVAL_KEYS_IGNORED = ("every", "outputs", "cache_initial")


def initial_eval_key(cfg: Config, model: torch.nn.Module, problems: list) -> str:
    """A hex digest of the starting weights, the eval problems and the settings that shape the result."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    for problem in problems:
        digest.update(repr(problem).encode())
    data = cfg.to_dict()
    settings = {
        "eval": {k: v for k, v in data["eval"].items() if k not in _EVAL_KEYS_IGNORED},
        "task": data["task"], "reward": data["reward"],
        "max_new_tokens": cfg.rollout.max_new_tokens, "chat_template": cfg.policy.chat_template,
        "dtype": cfg.policy.dtype, "device": cfg.policy.device, "seed": cfg.run.seed,
        "precision": str(eval_autocast_dtype(cfg)), "lm_head_fp32": cfg.policy.lm_head_fp32,
    }
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:24]


def cache_path(cfg: Config, key: str) -> Path:
    return cache_root(cfg.policy.cache_dir) / "initial-eval" / f"{key}.json"


def load(path: Path) -> dict[str, float] | None:
    """The cached metrics, or None when absent or unreadable (then the run evaluates and rewrites)."""
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) and "eval_reward" in metrics else None


def store(path: Path, metrics: dict[str, float]) -> None:
    """Write atomically: a concurrent reader sees the whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(metrics))
    tmp.replace(path)
