"""Start-up checks that need the file system or the loaded tokenizer: each fails with one
:class:`ConfigError` line, before anything is written or any worker is started.

Why here and not at config load: a config must still load on a machine that cannot run it (a GPU
config on a laptop, an out_dir on a cluster volume), and prompt lengths need the tokenizer.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from asyncrl.config_loader import ConfigError
from asyncrl.policy.prompts import encode_prompt
from asyncrl.rollout.scoring import check_reward

# A prompt longer than this many characters per allowed token is tokenized by its prefix only:
# tokenizing a 20 MB line whole takes seconds and gigabytes just to be refused.
_CHARS_PER_TOKEN_BOUND = 16


def check_writable(out_dir: str | Path) -> None:
    """``run.out_dir`` can hold a run directory: probe its nearest existing ancestor with a
    throwaway directory (``os.access`` says yes to root everywhere, even on read-only mounts)."""
    path = Path(out_dir).absolute()
    probe_at = path
    while not probe_at.exists():
        probe_at = probe_at.parent
    if not probe_at.is_dir():
        raise ConfigError("run.out_dir", f"{probe_at} is not a directory (out_dir: {out_dir})")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".asyncrl-probe-", dir=probe_at))
    except OSError as err:
        raise ConfigError("run.out_dir", f"cannot write under {probe_at}: {err.strerror or err}") from None


def _context_of(model) -> int | None:
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def prompt_tokens(tokenizer, text: str, limit: int, chat_template: bool) -> tuple[int, bool]:
    """(token count of prompt ``text`` as the rollout encodes it, exact?): a very long prompt is
    counted by its prefix, a lower bound, when that prefix alone is over ``limit``."""
    cap = _CHARS_PER_TOKEN_BOUND * (limit + 1)
    if len(text) > cap:
        head = len(encode_prompt(tokenizer, text[:cap], chat_template))
        if head > limit:
            return head, False
    return len(encode_prompt(tokenizer, text, chat_template)), True


def check_prompts(cfg, task, tokenizer, model) -> None:
    """Every prompt fits ``task.max_prompt_tokens`` and, with ``rollout.max_new_tokens``, the
    model's context; the first that does not is named by its file:line (dataset tasks)."""
    limit, new = cfg.task.max_prompt_tokens, cfg.rollout.max_new_tokens
    context = _context_of(model)
    if context is not None and new >= context:
        raise ConfigError("rollout.max_new_tokens", f"{new} leaves no room for a prompt in the model's "
                                                    f"context of {context} tokens (max_position_embeddings)")
    source = getattr(task, "source", lambda uid: f"problem {uid}")
    chat = cfg.policy.chat_template
    for split in ("train", "eval"):
        for problem in task.problems(split):
            n, exact = prompt_tokens(tokenizer, problem.prompt, limit, chat)
            if n > limit:
                size = f"{n} tokens" if exact else f"{len(problem.prompt):,} characters (over {n} tokens)"
                raise ConfigError("task.max_prompt_tokens", f"{source(problem.uid)}: prompt is {size}, "
                                                            f"over the limit of {limit}")
            if context is not None and n + new > context:
                raise ConfigError("rollout.max_new_tokens", f"{source(problem.uid)}: prompt of {n} tokens + "
                                  f"max_new_tokens {new} exceeds the model's context of {context} tokens")


def check_task(cfg, task, tokenizer, model) -> None:
    """The task can run with this model: its reward works on a gold solution (it neither raises
    nor returns NaN) and its prompts fit (:func:`check_prompts`)."""
    check_reward(task)
    check_prompts(cfg, task, tokenizer, model)
