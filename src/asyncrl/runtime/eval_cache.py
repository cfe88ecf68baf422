"""The evaluation before training, reused across runs that start from the same place.

Benchmark suites run many cells from one warm start and one seed; their step-0 evaluations are the
same computation (evaluation samples from its own generator, seeded by ``run.seed``, so skipping it
changes nothing else in the run). With ``eval.cache_initial`` the first run stores its step-0
metrics under ``initial-eval/<key>.json`` in the cache (:mod:`asyncrl.core.cache`) and the others
read them back. Episodes are evaluated in lock-step rounds (``eval.schedule=rounds``, the default),
which makes their evaluation the same computation too; under ``eval.schedule=ready`` the batches
follow the environments' timing, so two evaluations of one start differ by sampling noise, and the
entry is one draw of it (docs/training.md).

The key hashes everything the result depends on: the starting weights themselves (not their path),
the evaluation problems (prompts and answers), and the settings of evaluation, task, reward
functions, generation length, chat template, dtype, device and seed, the environment when episodes
are played (``env.*``: its name, tools, harness, turn limits), and, when evaluation generates
through the run's rollout engine (vLLM in sync and simulated modes), that engine and its dtype. Any
change is a new key, so a stale entry is never read.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from asyncrl.config import Config, ConfigError
from asyncrl.runtime.engines import generation_dtype
from asyncrl.training.evaluation import eval_autocast_dtype
from asyncrl.core.cache import cache_root, writable_cache_dir

# eval settings that do not change what the step-0 evaluation returns
_EVAL_KEYS_IGNORED = ("every", "outputs", "cache_initial")
# eval settings that shape only an evaluation that plays episodes (left out of single-turn keys,
# which stay as they were before these settings existed)
_EVAL_KEYS_OF_EPISODES = ("schedule",)


def initial_eval_key(cfg: Config, model: torch.nn.Module, problems: list, engine: str | None = None) -> str:
    """A hex digest of the starting weights, the eval problems and the settings that shape the result.
    ``engine``: the rollout engine evaluation generates through (None: the trained model itself)."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(tensor.dtype).encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    for problem in problems:
        digest.update(repr(problem).encode())
    data = cfg.to_dict()
    settings = {
        "eval": {k: v for k, v in data["eval"].items() if k not in _EVAL_KEYS_IGNORED
                 and (cfg.env.episodes or k not in _EVAL_KEYS_OF_EPISODES)},
        "task": data["task"], "reward": data["reward"],
        "max_new_tokens": cfg.rollout.max_new_tokens, "chat_template": cfg.policy.chat_template,
        "dtype": cfg.policy.dtype, "device": cfg.policy.device, "seed": cfg.run.seed,
        "precision": str(eval_autocast_dtype(cfg)), "lm_head_fp32": cfg.policy.lm_head_fp32,
    }
    if cfg.env.episodes:  # evaluation plays episodes: the environment, tools and limits shape its result
        settings["env"] = data["env"]  # (absent for single turns, whose keys stay as they were)
    if engine is not None:  # absent otherwise: the keys of evaluations on the trained model stay as they were
        settings.update(engine=engine, generation_dtype=generation_dtype(cfg))
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()[:24]


def cache_path(cfg: Config, key: str) -> Path | None:
    """Where the step-0 metrics of ``key`` are cached; None, with a warning, when the cache directory
    cannot be one (a file): the cache only saves time, so the run evaluates and goes on."""
    try:
        return cache_root(cfg.policy.cache_dir) / "initial-eval" / f"{key}.json"
    except ConfigError as err:
        _warn(str(err).removeprefix("config error: "))
        return None


def _warn(why: str) -> None:
    print(f"asyncrl: warning: eval.cache_initial: the step-0 evaluation is not cached ({why})", file=sys.stderr)


def load(path: Path | None) -> dict[str, float] | None:
    """The cached metrics, or None when absent or unreadable (then the run evaluates and rewrites)."""
    if path is None:
        return None
    try:
        metrics = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return metrics if isinstance(metrics, dict) and "eval_reward" in metrics else None


def store(path: Path | None, metrics: dict[str, float]) -> None:
    """Write atomically: a concurrent reader sees the whole file or none. A cache that cannot be
    written (read-only) is a warning: the run goes on without it."""
    if path is None:
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        writable_cache_dir(path.parent)
        tmp.write_text(json.dumps(metrics))
        tmp.replace(path)
    except ConfigError as err:
        _warn(str(err).removeprefix("config error: "))
    except OSError as err:
        tmp.unlink(missing_ok=True)
        _warn(f"cannot write {path}: {err.strerror or err}")
