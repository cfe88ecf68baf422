"""RL post-training of the tiny model in one readable loop, built from asyncrl's parts.

This is the core of ``asyncrl train run.mode=sync``: each step generates a group batch with the
weights being trained, scores it, and trains one step on it. Everything a run adds around that
loop is left out here — the run directory, metrics files and trackers, evaluation, checkpoints,
resuming, signal handling, asynchronous rollout workers. With the same config and seed the loop
reaches the same weights as ``asyncrl train run.mode=sync``, bit for bit
(tests/foundation/test_example_loop.py checks two steps).

    .venv/bin/python examples/train_loop.py                          # defaults: tiny model, arithmetic
    .venv/bin/python examples/train_loop.py trainer.steps=20 loss.name=ppo

The arguments are ``asyncrl train`` overrides (``dotted.key=value``; ``asyncrl train --help-keys``
lists them). The trained policy is written at the end as a Hugging Face folder,
``<run.out_dir>/<run.name>`` (``run.name`` defaults to ``train-loop`` here).

The parts, and where the full run builds the same ones:

    config        asyncrl.runtime.validate.load_run_config       (asyncrl.cli)
    task, rewards asyncrl.tasks.configured_task, RewardSet.from_config (asyncrl.runtime.session)
    warm start    asyncrl.training.pretrain.warm_start           (cached: built once, then reused)
    prompts       asyncrl.rollout.PromptStream                   (asyncrl.runtime.sources.lockstep)
    generation    asyncrl.runtime.engines.rollout_engine
    scoring       asyncrl.rollout.score → asyncrl.types.Batch
    training      asyncrl.training.trainer.Learner.step          (advantages, π_prox, minibatch updates)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from asyncrl.config import Config
from asyncrl.config.threads import trainer_threads
from asyncrl.policy.lora import apply_lora
from asyncrl.policy.model import check_device, load_policy_for, set_deterministic
from asyncrl.policy.prompts import encode_problems
from asyncrl.rewards import RewardSet
from asyncrl.rollout import PromptStream, score
from asyncrl.runtime.engines import rollout_engine
from asyncrl.runtime.preflight import check_task
from asyncrl.runtime.validate import load_run_config
from asyncrl.tasks import configured_task
from asyncrl.training.pretrain import warm_start
from asyncrl.training.reference import build_reference
from asyncrl.training.trainer import Learner

DEFAULT_NAME = "train-loop"


def starting_policy(cfg: Config, task) -> tuple[torch.nn.Module, object, Path]:
    """(model, tokenizer, the folder they came from): ``policy.model_path`` if set, else the cached
    warm start of the tiny model (pretrained on the task's demonstrations the first time: minutes)."""
    policy_dir = Path(cfg.policy.model_path) if cfg.policy.model_path else warm_start(cfg, task)
    model, tokenizer = load_policy_for(cfg.policy, policy_dir)
    model = apply_lora(model, cfg.policy)  # a LoRA adapter when policy.lora_rank > 0, else the model itself
    return model, tokenizer, policy_dir


def build_trainer(cfg: Config, model: torch.nn.Module, policy_dir: Path) -> Learner:
    """The trainer of ``model``: its AdamW optimizer, the loss ``loss.name``, the proximal policy
    ``trainer.prox``, and a frozen reference for the KL penalty when ``trainer.kl_coef`` > 0."""
    reference = build_reference(cfg, model, policy_dir)
    return Learner(model, cfg.trainer, cfg.loss, temperature=cfg.rollout.temperature, seed=cfg.run.seed,
                   reference=reference, lm_head_fp32=cfg.policy.lm_head_fp32)


def train_loop(overrides: list[str]) -> torch.nn.Module:
    """Train for ``trainer.steps`` steps; returns the trained model (also written to disk)."""
    cfg = load_run_config(overrides=overrides)  # defaults ← overrides, checked (a bad key is one line)
    if cfg.run.mode != "sync":
        print(f"train_loop: this is the sync loop; run.mode={cfg.run.mode} is not used", file=sys.stderr)
    ro = cfg.rollout

    # The process's settings, as `asyncrl train` sets them: thread count (float sums depend on it),
    # deterministic kernels if asked, and the global seed (a LoRA adapter's initialisation draws on it).
    torch.set_num_threads(trainer_threads(cfg))  # policy.torch_threads; 0 = every core
    check_device(cfg.policy.device)
    set_deterministic(cfg.run.deterministic)
    torch.manual_seed(cfg.run.seed)

    # The problem set and its reward functions, then the policy to train.
    task = configured_task(cfg.task)
    rewards = RewardSet.from_config(cfg.reward, task)
    model, tokenizer, policy_dir = starting_policy(cfg, task)
    # The reward works on a gold solution, and the training prompts that fit task.max_prompt_length
    # (over-long ones are dropped or truncated per task.long_prompts, or refused).
    train_problems = check_task(cfg, task, tokenizer, model, rewards).train

    trainer = build_trainer(cfg, model, policy_dir)
    # Sync mode generates with the trained model itself when it already has the generation dtype and
    # device (no copy); each engine samples from its own seeded generator.
    engine = rollout_engine(cfg, model=model, tokenizer=tokenizer, policy_dir=policy_dir, seed=cfg.run.seed,
                            chunked=False)
    prompts = PromptStream(train_problems, ro.prompts_per_step, seed=cfg.run.seed)

    for step in range(1, cfg.trainer.steps + 1):
        started = time.perf_counter()
        # Generate: samples_per_prompt completions of each of the step's prompts (a group each),
        # by the weights of the current version.
        problems = prompts.next()
        encoded = encode_problems(tokenizer, problems, ro.samples_per_prompt, cfg.policy.chat_template,
                                  cfg.task.truncate_to)
        generation = engine.generate(encoded)

        # Score: each completion's reward; the Batch holds the tokens, the behaviour log-probs and
        # versions the engine recorded, the rewards and each row's group.
        batch = score(generation, problems, ro.samples_per_prompt, rewards, tokenizer,
                      first_group_id=(step - 1) * ro.prompts_per_step)

        # Train: group advantages, π_prox, trainer.n_minibatches AdamW updates; the version moves on.
        stats = trainer.step(batch)

        # Publish: the engine's weights become the new version (no copy when it generates with the
        # trained model itself).
        engine.update_weights(trainer.model, trainer.version)
        print(f"step {step}: reward {batch.rewards.mean().item():.3f}  loss {stats['loss']:.4f}  "
              f"grad norm {stats['grad_norm']:.3f}  ({time.perf_counter() - started:.1f} s)")

    out = Path(cfg.run.out_dir) / (cfg.run.name or DEFAULT_NAME)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    print(f"trained policy: {out}")
    return model


if __name__ == "__main__":
    train_loop(sys.argv[1:])
