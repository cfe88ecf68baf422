"""Supervised warm start of the embedded tiny model (``asyncrl pretrain``), built once per user.

Its cache key hashes :class:`WarmStartInputs`: the model shape, the pretrain settings, the device
type and the demonstrations (the task's train problems that carry a worked solution; a task with
none, such as prompt-only rows, gets the general warm start: :mod:`asyncrl.training.demonstrations`).
The build reads what it learns from through that record only, so a setting that changes the
weights cannot be missing from the key, and nothing else (evaluation, trainer or run settings, task
keys that leave the train problems as they are, the working directory) rebuilds it. It lives in the user cache
(:mod:`asyncrl.core.cache`), written under a temporary name and renamed at the end: an interrupted
pretrain never leaves a half-written model that a later run would pick up. A cached one is read
whole before a run starts from it: a weight file that does not read back, or holds NaN or inf
(damaged on disk since it was built), is one line naming the file and saying to delete the folder
(the next run builds it again); it is not rebuilt silently, since other runs may be using it.

Precision: on CUDA the forward passes (training and the summary's evaluation) run under bf16
autocast, with float32 master weights and optimizer, and TF32 matmuls for what stays float32; on
the CPU everything is float32. The device type is in the key, so each keeps its own warm start.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import json
import math
import random
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from asyncrl.config import Config, ModelConfig, PretrainConfig
from asyncrl.training.evaluation import autocast_to, episode_rollout, eval_engine, evaluate
from asyncrl.tracking.metrics import json_safe
from asyncrl.policy.model import build_tiny_model, check_device, num_parameters
from asyncrl.policy.tokenizer import train_tokenizer
from asyncrl.core.progress import TrainProgress
from asyncrl.tasks import Problem, Task
from asyncrl.tasks.base import EOS_SEGMENT
from asyncrl.core.cache import cache_root, writable_cache_dir
from asyncrl.core.finite import BadTensor, first_bad_in_safetensors
from asyncrl.core.user_code import first_line
from asyncrl.training.demonstrations import WarmStartSource, warm_start_source

CACHE_VERSION = 4  # bump when the pretraining code changes what it produces (4: bf16 autocast on CUDA)


def _demonstration_text(problems: tuple[Problem, ...]) -> list[tuple]:
    # what the tokenizer and the demonstrations are made of (uid, row fields and messages are not);
    # an episode's trained/observed segments only where a task gives them (the others' keys stay)
    return [(p.prompt, p.answer, p.solution) + ((p.segments,) if p.segments else ()) for p in problems]


@dataclass(frozen=True)
class WarmStartInputs:
    """Everything the warm start's tokenizer and weights depend on, and nothing else: the cache key
    hashes every field, and :func:`train_warm_start` reads nothing but these."""

    model: ModelConfig
    pretrain: PretrainConfig  # torch_threads too: the thread count can change float sums
    device: str  # the device type ("cpu", "cuda"): other kernels, other weights
    demonstrations: tuple[Problem, ...]  # train problems with worked solutions (WarmStartSource)

    @classmethod
    def of(cls, cfg: Config, task: Task | None = None, source: WarmStartSource | None = None) -> WarmStartInputs:
        source = source if source is not None else warm_start_source(cfg, task)
        return cls(model=cfg.model, pretrain=cfg.pretrain, device=torch.device(cfg.policy.device).type,
                   demonstrations=source.demonstrations)

    def key(self) -> str:
        payload: dict[str, Any] = {"v": CACHE_VERSION}
        for f in dataclasses.fields(self):  # every field: one added later is in the key by itself
            value = getattr(self, f.name)
            if f.name == "demonstrations":
                value = hashlib.sha256(json.dumps(_demonstration_text(value)).encode()).hexdigest()
            elif dataclasses.is_dataclass(value):
                value = dataclasses.asdict(value)
            payload[f.name] = value
        return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:12]


def cache_key(cfg: Config, task: Task | None = None) -> str:
    return WarmStartInputs.of(cfg, task).key()


def pretrained_dir(cfg: Config, task: Task | None = None, inputs: WarmStartInputs | None = None) -> Path:
    inputs = inputs if inputs is not None else WarmStartInputs.of(cfg, task)
    return cache_root(cfg.policy.cache_dir) / f"tiny-{inputs.key()}"


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
        if p.segments:  # a demonstrated episode: segment by segment, observations not trained
            ids, labels = list(prompt), [-100] * len(prompt)
            for text, trained in p.segments:
                piece = ([tokenizer.eos_token_id] if text == EOS_SEGMENT
                         else tokenizer(text, add_special_tokens=False)["input_ids"])
                ids += piece
                labels += piece if trained else [-100] * len(piece)
            rows.append(ids + [tokenizer.eos_token_id])
            label_rows.append(labels + [tokenizer.eos_token_id])
            continue
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


def pretrain(cfg: Config, on_step: Callable[[int, float], None] | None = None, task: Task | None = None) -> Path:
    """Build tokenizer + model, run the warm start, evaluate, save (replacing a cached one).
    Returns the model directory. ``on_step(step, sft_loss)`` after each step."""
    source = warm_start_source(cfg, task)
    if source.note is not None:
        print(f"asyncrl: {source.note}", file=sys.stderr)
    inputs = WarmStartInputs.of(cfg, source=source)
    out = pretrained_dir(cfg, inputs=inputs)
    with _build_lock(out):
        _build(cfg, inputs, source, out, on_step)
    return out


def warm_start(cfg: Config, task: Task | None = None) -> Path:
    """The cached warm start for ``cfg``, built first when there is none: with the step display of
    ``asyncrl pretrain`` (``run.progress``, on stderr), then a line with its time and directory.
    Runs started together (bench --jobs) wait on one lock for one build. A task without worked
    solutions gets the general warm start, said in one line (:mod:`asyncrl.training.demonstrations`)."""
    source = warm_start_source(cfg, task)
    inputs = WarmStartInputs.of(cfg, source=source)
    out = pretrained_dir(cfg, inputs=inputs)
    progress = TrainProgress(cfg.pretrain.steps, "pretrain", enabled=cfg.run.progress)
    if source.note is not None and progress.enabled:
        progress.log(source.note)
    elif source.note is not None:  # a line whatever run.progress says: the start is not what was asked
        print(f"asyncrl: {source.note}", file=sys.stderr)
    if is_complete(out):
        check_cached(out)
        return out
    with _build_lock(out):
        if is_complete(out):  # built by the run that held the lock before us
            check_cached(out)
            return out
        progress.log(f"warm start not cached; building it ({cfg.pretrain.steps} steps, as `asyncrl pretrain`)")
        started = time.monotonic()
        with progress:
            _build(cfg, inputs, source, out, on_step=lambda step, loss: progress.update(step + 1, sft_loss=loss))
        took = timedelta(seconds=round(time.monotonic() - started))
        progress.log(f"warm start built in {took}; saved to {out}")
    return out


def check_cached(out: Path) -> None:
    """Every weight file of the cached warm start ``out`` reads back and holds finite values; else
    :class:`~asyncrl.core.finite.BadTensor` naming the file (exit 2)."""
    for path in sorted(out.glob("*.safetensors")):
        try:
            found = first_bad_in_safetensors(path)
        except Exception as err:  # noqa: BLE001 (the library's error for a torn file varies)
            found = first_line(err)
        if found:
            raise BadTensor(f"the cached warm start {path} is damaged ({found}); delete {out} and the next "
                            f"run builds it again", key="policy.cache_dir")


@contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    writable_cache_dir(out.parent)  # a read-only cache: one line naming it and its setting
    # hidden, so that it never looks like a warm start itself (tiny-* in the cache are models)
    with open(out.with_name(f".{out.name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _build(cfg: Config, inputs: WarmStartInputs, source: WarmStartSource, out: Path,
           on_step: Callable[[int, float], None] | None) -> None:
    """Train from ``inputs``, evaluate on ``source``'s task (for the summary only: not part of the
    key), save to ``out``."""
    task = source.task
    threads = torch.get_num_threads()
    torch.set_num_threads(inputs.pretrain.torch_threads)
    try:
        started = time.time()
        device = check_device(cfg.policy.device)
        model, tokenizer, loss_value = train_warm_start(inputs, device, on_step)
        engine = eval_engine(model, tokenizer, max_new_tokens=cfg.rollout.max_new_tokens,
                             temperature=cfg.eval.temperature)
        problems = task.problems("eval")[: cfg.eval.n_problems]
        accuracy = None  # a run without evaluation (eval.n_problems=0) does not score its warm start
        if problems:
            with autocast_to(device, warm_start_autocast(device)):
                accuracy = evaluate(engine, tokenizer, task, problems, batch_size=cfg.eval.batch_size,
                                    samples=cfg.eval.samples,
                                    # episodes: as trained (the general warm start's arithmetic has none)
                                    rollout=None if source.general else episode_rollout(cfg, None, task, tokenizer))
    finally:
        torch.set_num_threads(threads)
    summary = {
        "final_sft_loss": loss_value, "eval_reward": accuracy, "steps": inputs.pretrain.steps,
        "wall_time_s": time.time() - started, "parameters": num_parameters(model),
        "vocab_size": len(tokenizer), "cache_key": inputs.key(),
    }
    _save(out, model, tokenizer, summary)


def warm_start_autocast(device: torch.device | str) -> torch.dtype | None:
    """The autocast dtype of the warm start's forward passes: bfloat16 on CUDA, none on the CPU."""
    return torch.bfloat16 if torch.device(device).type == "cuda" else None


def train_warm_start(inputs: WarmStartInputs, device: torch.device | str,
                     on_step: Callable[[int, float], None] | None = None) -> tuple[torch.nn.Module, Any, float]:
    """(model in eval mode, tokenizer, final SFT loss), from ``inputs`` alone; ``device``: where it
    runs (its type is ``inputs.device``)."""
    pc, train = inputs.pretrain, list(inputs.demonstrations)
    corpus = [p.prompt + p.solution for p in train] + [demonstration(p, True) for p in train[:200]]
    tokenizer = train_tokenizer(corpus, inputs.model.vocab_size, inputs.model.split_digits)
    model = build_tiny_model(inputs.model, tokenizer, seed=pc.seed).to(device)
    precision = warm_start_autocast(device)  # the weights and AdamW stay float32
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
        with autocast_to(device, precision):
            loss = model(input_ids=ids, attention_mask=attn, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_value = loss.item()
        if on_step is not None:
            on_step(step, loss_value)
    model.eval()
    return model, tokenizer, loss_value


def _save(out: Path, model: torch.nn.Module, tokenizer, summary: dict) -> None:
    """Write under a hidden temporary name, then rename: ``is_complete`` never sees half a model.
    Called under the build lock, so a leftover temporary is one an interrupted build left."""
    tmp = out.with_name(f".{out.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.cpu().save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    # no NaN in JSON (pretrain.steps=0 has no loss): null instead
    (tmp / "pretrain_summary.json").write_text(json.dumps(json_safe(summary), indent=2, allow_nan=False))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
