"""Supervised warm start of the embedded tiny model (``asyncrl pretrain``), cached by config hash.

The cache key covers every setting that changes the weights (model shape, task, pretrain
hyperparameters), so ``train`` reuses a warm start only when it is the one it would have built.
The directory is written under a temporary name and renamed at the end: an interrupted pretrain
never leaves a half-written model that a later run would pick up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import random
import shutil
import time
from pathlib import Path
from typing import Callable

import torch

from asyncrl.config import Config
from asyncrl.evaluation import eval_engine, evaluate
from asyncrl.policy.model import build_tiny_model, check_device, num_parameters
from asyncrl.policy.tokenizer import train_tokenizer
from asyncrl.tasks import Problem

CACHE_VERSION = 2  # bump when the pretraining code changes what it produces


def cache_key(cfg: Config) -> str:
    payload = {
        "v": CACHE_VERSION,
        "model": dataclasses.asdict(cfg.model),
        "task": dataclasses.asdict(cfg.task),
        "pretrain": dataclasses.asdict(cfg.pretrain),
    }
    if not cfg.pretrain.shortcut_frac:  # added later: warm starts built before it keep their key
        del payload["pretrain"]["shortcut_frac"]
    device = cfg.policy.device.split(":")[0]
    if device != "cpu":  # other kernels, other weights; the CPU key stays what it always was
        payload["device"] = device
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def pretrained_dir(cfg: Config) -> Path:
    return Path(cfg.policy.cache_dir) / f"tiny-{cache_key(cfg)}"


def is_complete(path: Path) -> bool:
    return (path / "pretrain_summary.json").is_file()


ALT_STYLE = " The answer is {answer}."


def demonstration(problem: Problem, alt_style: bool, shortcut: bool = False) -> str:
    """The worked solution, optionally in the alternative answer style that the GSM8K-style reward
    does not accept ("... = 8. The answer is 8." instead of "... = 8. #### 8"), and optionally cut
    short: a multi-step solution that stops after its first operation and answers that result
    (" 7 + 5 = 12. #### 12" for " 7 + 5 = 12. 12 - 7 = 5. #### 5"), a reasoning error in the
    reward's own format."""
    if "####" not in problem.solution:
        return problem.solution
    body, answer = problem.solution.rsplit(" ####", 1)[0], problem.answer
    steps = body.split(". ")
    if shortcut and len(steps) > 1:
        body = steps[0] + "."
        answer = body.rsplit("= ", 1)[1].rstrip(".")
    return body + (ALT_STYLE.format(answer=answer) if alt_style else f" #### {answer}")


def sft_batch(tokenizer, problems: list[Problem], alt_style: list[bool] | None = None,
              shortcut: list[bool] | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded (ids [B, L], attention [B, L], labels [B, L]) with the loss on the solution only."""
    rows, label_rows = [], []
    alt_style = alt_style or [False] * len(problems)
    shortcut = shortcut or [False] * len(problems)
    for p, alt, short in zip(problems, alt_style, shortcut):
        prompt = tokenizer(p.prompt)["input_ids"]
        solution = demonstration(p, alt, short)
        full = prompt + tokenizer(solution, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(full)
        label_rows.append([-100] * len(prompt) + full[len(prompt):])
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (row, lab) in enumerate(zip(rows, label_rows)):
        ids[i, : len(row)] = torch.tensor(row)
        labels[i, : len(lab)] = torch.tensor(lab)
        attn[i, : len(row)] = 1
    return ids, attn, labels


def lr_at(step: int, cfg) -> float:
    """Linear warmup then cosine decay to 10 % of the peak."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    frac = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


def pretrain(cfg: Config, on_step: Callable[[int, float], None] | None = None) -> Path:
    """Build tokenizer + model, run the warm start, evaluate, save. Returns the model directory."""
    threads = torch.get_num_threads()
    torch.set_num_threads(cfg.pretrain.torch_threads)
    try:
        return _pretrain(cfg, on_step)
    finally:
        torch.set_num_threads(threads)


def _pretrain(cfg: Config, on_step: Callable[[int, float], None] | None) -> Path:
    out = pretrained_dir(cfg)
    pc = cfg.pretrain
    task = cfg.task.build()
    train = task.problems("train")
    started = time.time()
    corpus = [p.prompt + p.solution for p in train] + [demonstration(p, True) for p in train[:200]]
    tokenizer = train_tokenizer(corpus, cfg.model.vocab_size,
                                cfg.model.split_digits)
    device = check_device(cfg.policy.device)
    model = build_tiny_model(cfg.model, tokenizer, seed=pc.seed).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=pc.lr, weight_decay=pc.weight_decay, betas=(0.9, 0.95))
    rng = random.Random(pc.seed)
    style_rng = random.Random(pc.seed + 1)
    shortcut_rng = random.Random(pc.seed + 2)  # its own stream: the other draws do not depend on it
    order: list[Problem] = []
    model.train()
    loss_value = float("nan")
    for step in range(pc.steps):
        if len(order) < pc.batch_size:
            order += rng.sample(train, len(train))
        chunk, order = order[: pc.batch_size], order[pc.batch_size:]
        alt = [style_rng.random() < pc.alt_style_frac for _ in chunk]
        short = [shortcut_rng.random() < pc.shortcut_frac for _ in chunk]
        ids, attn, labels = (t.to(device) for t in sft_batch(tokenizer, chunk, alt, short))
        for group in opt.param_groups:
            group["lr"] = lr_at(step, pc)
        loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    engine = eval_engine(model, tokenizer, max_new_tokens=cfg.rollout.max_new_tokens,
                         temperature=cfg.eval.temperature)
    accuracy = evaluate(engine, tokenizer, task, task.problems("eval")[: cfg.eval.n_problems],
                        batch_size=cfg.eval.batch_size, samples=cfg.eval.samples)
    summary = {
        "final_sft_loss": loss_value, "eval_reward": accuracy, "steps": pc.steps,
        "wall_time_s": time.time() - started, "parameters": num_parameters(model),
        "vocab_size": len(tokenizer), "cache_key": cache_key(cfg),
    }
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.cpu().save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    (tmp / "pretrain_summary.json").write_text(json.dumps(summary, indent=2))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
