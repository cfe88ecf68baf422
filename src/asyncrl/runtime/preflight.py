"""Start-up checks that need the file system or the loaded tokenizer: each fails with one
:class:`ConfigError` line, before anything is written or any worker is started.

Why here and not at config load: a config must still load on a machine that cannot run it (a GPU
config on a laptop, an out_dir on a cluster volume), and prompt lengths need the tokenizer.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from asyncrl.core.loader import ConfigError
from asyncrl.policy.prompts import encode_prompt, prompt_of
from asyncrl.rollout.scoring import check_reward

# A prompt longer than this many characters per allowed token is tokenized by its prefix only:
# tokenizing it whole takes seconds just to be refused. (Prompts over task.max_prompt_chars never
# get here: the task build refuses them, asyncrl.tasks.limits.)
_CHARS_PER_TOKEN_BOUND = 16


def check_writable(out_dir: str | Path, key: str = "run.out_dir") -> None:
    """``out_dir`` (the setting ``key``) can hold a run directory: probe its nearest existing ancestor
    with a throwaway directory (``os.access`` says yes to root everywhere, even on read-only mounts)."""
    path = Path(out_dir).absolute()
    probe_at = path
    while not probe_at.exists():
        probe_at = probe_at.parent
    if not probe_at.is_dir():
        raise ConfigError(key, f"{probe_at} is not a directory ({key.rpartition('.')[2]}: {out_dir})")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".asyncrl-probe-", dir=probe_at))
    except OSError as err:
        raise ConfigError(key, f"cannot write under {probe_at}: {err.strerror or err}") from None


def _context_of(model) -> int | None:
    config = getattr(model, "config", None)
    value = getattr(config, "max_position_embeddings", None)
    return value if isinstance(value, int) and value > 0 else None


def prompt_tokens(tokenizer, prompt, limit: int, chat_template: bool) -> tuple[int, bool]:
    """(token count of ``prompt`` — a string or a conversation — as the rollout encodes it, exact?):
    a very long string is counted by its prefix, a lower bound, when that prefix alone is over ``limit``."""
    cap = _CHARS_PER_TOKEN_BOUND * (limit + 1)
    if isinstance(prompt, str) and len(prompt) > cap:
        head = len(encode_prompt(tokenizer, prompt[:cap], chat_template))
        if head > limit:
            return head, False
    return len(encode_prompt(tokenizer, prompt, chat_template)), True


@dataclass
class PromptFit:
    """The problems that go into the run after ``task.long_prompts`` (drop / truncate) was applied,
    and how many prompts of each split were over ``task.max_prompt_length``."""

    train: list
    eval: list
    over: dict[str, int] = field(default_factory=lambda: {"train": 0, "eval": 0})
    action: str = "error"

    def counts(self) -> dict[str, int]:
        """Summary fields: ``prompts_dropped_train`` ... (empty when no prompt was too long)."""
        done = "dropped" if self.action == "drop" else "truncated"
        return {f"prompts_{done}_{split}": n for split, n in self.over.items()} if any(self.over.values()) else {}

    def message(self, limit: int) -> str | None:
        if not any(self.over.values()):
            return None
        done = "dropped" if self.action == "drop" else "left-truncated"
        return (f"task: {self.over['train']} train and {self.over['eval']} eval prompt(s) longer than "
                f"task.max_prompt_length={limit} tokens: {done} (task.long_prompts={self.action})")


def check_prompts(cfg, task, tokenizer, model) -> PromptFit:
    """Every prompt fits ``task.max_prompt_length`` (else, by ``task.long_prompts``: the first that
    does not is named by its file:line, or over-long prompts are dropped / counted for truncation)
    and, with ``rollout.max_new_tokens``, the model's context."""
    limit, new, action = cfg.task.max_prompt_length, cfg.rollout.max_new_tokens, cfg.task.long_prompts
    context = _context_of(model)
    if context is not None and new >= context:
        raise ConfigError("rollout.max_new_tokens", f"{new} leaves no room for a prompt in the model's "
                                                    f"context of {context} tokens (max_position_embeddings)")
    source = getattr(task, "source", lambda uid: f"problem {uid}")
    chat = cfg.policy.chat_template
    fit = PromptFit([], [], action=action)
    for split in ("train", "eval"):
        for problem in task.problems(split):
            n, exact = prompt_tokens(tokenizer, prompt_of(problem), limit, chat)
            if n > limit:
                if action == "error":
                    size = f"{n} tokens" if exact else f"{len(problem.prompt):,} characters (over {n} tokens)"
                    raise ConfigError("task.max_prompt_length", f"{source(problem.uid)}: prompt is {size}, over "
                                      f"the limit of {limit} (task.long_prompts=drop or truncate to go on)")
                fit.over[split] += 1
                if action == "drop":
                    continue
                n = limit
            if context is not None and n + new > context:
                raise ConfigError("rollout.max_new_tokens", f"{source(problem.uid)}: prompt of {n} tokens + "
                                  f"max_new_tokens {new} exceeds the model's context of {context} tokens")
            getattr(fit, split).append(problem)
    for split in ("train", "eval"):
        if not getattr(fit, split) and task.problems(split):  # an eval split may be empty: no evaluation
            raise ConfigError("task.max_prompt_length", f"every {split} prompt is longer than {limit} tokens "
                                                        "(task.long_prompts=drop)")
    return fit


def check_task(cfg, task, tokenizer, model, rewards=None) -> PromptFit:
    """The task can run with this model: its reward functions (``rewards``, a RewardSet; None = the
    task's own reward) work on a gold solution (they neither raise nor return NaN) and its prompts
    fit (:func:`check_prompts`, whose :class:`PromptFit` is returned)."""
    check_reward(task, rewards, episodes=cfg.env.episodes)
    return check_prompts(cfg, task, tokenizer, model)
