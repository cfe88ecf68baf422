"""Synchronous GRPO: generate a batch with the current weights, then train on it (the paper's
"sync" baseline). The generator waits while the trainer trains, and vice versa."""

from __future__ import annotations

import time

import torch

from asyncrl.config import Config
from asyncrl.rollout import PromptStream, TransformersEngine, score
from asyncrl.runtime.session import Session
from asyncrl.trainer import Trainer


def run_sync(cfg: Config) -> dict:
    torch.set_num_threads(cfg.policy.torch_threads)
    session = Session.open(cfg)
    ro = cfg.rollout
    trainer = Trainer(session.model, cfg.trainer, cfg.loss, temperature=ro.temperature, seed=cfg.run.seed)
    engine = TransformersEngine(session.model, session.tokenizer, max_new_tokens=ro.max_new_tokens,
                                temperature=ro.temperature, seed=cfg.run.seed)
    prompts = PromptStream(session.train_problems, ro.prompts_per_step, seed=cfg.run.seed)
    gen_total = train_total = 0.0
    tokens_total = 0
    with session.progress as progress:
        eval_acc = session.evaluate(0)
        progress.update(0, eval_acc=eval_acc)
        for step in range(1, cfg.trainer.steps + 1):
            problems = prompts.next()
            t0 = time.perf_counter()
            gen = engine.generate(problems, ro.samples_per_prompt, version=trainer.version)
            gen_time = time.perf_counter() - t0
            batch = score(gen, problems, ro.samples_per_prompt, session.task, session.tokenizer,
                          first_group_id=(step - 1) * ro.prompts_per_step)
            stats = trainer.step(batch)
            n_tokens = int(batch.completion_mask.sum())
            gen_total += gen_time
            train_total += stats["train_time_s"]
            tokens_total += n_tokens
            record = {
                "version": trainer.version, "reward_mean": batch.rewards.mean().item(),
                "gen_time_s": gen_time, "gen_tokens": n_tokens,
                "gen_tokens_per_s": n_tokens / max(gen_time, 1e-9),
                "completion_len_mean": n_tokens / len(batch), **stats,
            }
            if session.eval_due(step):
                eval_acc = session.evaluate(step)
                record["eval_reward"] = eval_acc
            session.metrics.write(step, record)
            progress.update(step, reward=record["reward_mean"],
                            eval_acc=record.get("eval_reward"), tokens_per_s=record["gen_tokens_per_s"])
            if session.checkpoint_due(step):
                session.checkpoint(step, trainer.state_dict())
    steps = cfg.trainer.steps
    return session.finish(steps, {
        "gen_time_per_step_s": gen_total / max(steps, 1),
        "train_time_per_step_s": train_total / max(steps, 1),
        "gen_tokens_per_s": tokens_total / max(gen_total, 1e-9),
        "run_dir": str(session.run_dir),
    })
