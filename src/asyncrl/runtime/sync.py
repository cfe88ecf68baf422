"""Synchronous GRPO: generate a batch with the current weights, then train on it (the paper's
"sync" baseline). The generator waits while the trainer trains, and vice versa."""

from __future__ import annotations

import time

import torch

from asyncrl.config import Config
from asyncrl.rollout import PromptStream, TransformersEngine, score
from asyncrl.runtime.session import Session
from asyncrl.runtime.stats import staleness_metrics
from asyncrl.trainer import Trainer


class CurrentPolicy:
    """Sync: every batch comes from the weights being trained."""

    def __init__(self, model):
        self.model = model

    def select(self, version: int) -> tuple[torch.nn.Module, int]:
        return self.model, version

    def record(self, model, version: int) -> None:
        pass


def make_engine(cfg: Config, session: Session):
    """The rollout engine of ``rollout.engine``. vLLM starts from the policy directory (version 0:
    the weights the session loaded; with LoRA the merged weights equal them at version 0)."""
    ro = cfg.rollout
    if ro.engine == "vllm":
        from asyncrl.rollout.vllm_engine import VLLMEngine
        from asyncrl.runtime.session import resolve_policy_dir

        return VLLMEngine(resolve_policy_dir(cfg), session.tokenizer, max_new_tokens=ro.max_new_tokens,
                          temperature=ro.temperature, seed=cfg.run.seed,
                          chat_template=cfg.policy.chat_template, dtype=cfg.policy.dtype, version=0,
                          **ro.vllm_kwargs)
    return TransformersEngine(session.model, session.tokenizer, max_new_tokens=ro.max_new_tokens,
                              temperature=ro.temperature, seed=cfg.run.seed,
                              chat_template=cfg.policy.chat_template)


def run_sync(cfg: Config) -> dict:
    return run_lockstep(cfg, CurrentPolicy)


def run_lockstep(cfg: Config, make_source) -> dict:
    """Generate a batch, then train on it, one after the other. ``make_source(model)`` returns an
    object whose ``select(version)`` gives the (model, version) that generates the next batch and
    whose ``record(model, version)`` sees the weights after each step."""
    torch.set_num_threads(cfg.policy.torch_threads)
    session = Session.open(cfg)
    ro = cfg.rollout
    trainer = Trainer(session.model, cfg.trainer, cfg.loss, temperature=ro.temperature, seed=cfg.run.seed)
    source = make_source(session.model)
    engine = make_engine(cfg, session)
    prompts = PromptStream(session.train_problems, ro.prompts_per_step, seed=cfg.run.seed)
    gen_total = train_total = prox_total = 0.0
    tokens_total = 0
    with session.progress as progress:
        progress.update(0, eval_acc=session.evaluate(0))
        train_started = time.perf_counter()
        for step in range(1, cfg.trainer.steps + 1):
            problems = prompts.next()
            t0 = time.perf_counter()
            model, version = source.select(trainer.version)
            if ro.engine == "vllm":
                if version != engine.version:  # in place, then tokens carry the new version
                    engine.update_weights(model, version)
            else:
                engine.model = model
            gen = engine.generate(problems, ro.samples_per_prompt, version=version)
            batch = score(gen, problems, ro.samples_per_prompt, session.task, session.tokenizer,
                          first_group_id=(step - 1) * ro.prompts_per_step)
            gen_time = time.perf_counter() - t0
            record = {"reward_mean": batch.rewards.mean().item(),
                      **staleness_metrics(batch, trainer.version)}
            stats = trainer.step(batch)
            source.record(session.model, trainer.version)
            n_tokens = int(batch.completion_mask.sum())
            gen_total += gen_time
            train_total += stats["train_time_s"]
            prox_total += stats["prox_time_s"]
            tokens_total += n_tokens
            record.update({
                "version": trainer.version, "gen_time_s": gen_time, "gen_tokens": n_tokens,
                "gen_tokens_per_s": n_tokens / max(gen_time, 1e-9),
                "step_time_s": time.perf_counter() - t0,
                "completion_len_mean": n_tokens / len(batch), **stats,
            })
            session.finish_step(step, record, trainer)
        train_wall = time.perf_counter() - train_started - session.eval_time_s
    steps = max(cfg.trainer.steps, 1)
    return session.finish(cfg.trainer.steps, {
        "train_wall_s": train_wall, "time_per_step_s": train_wall / steps,
        "gen_time_per_step_s": gen_total / steps, "train_time_per_step_s": train_total / steps,
        "prox_time_per_step_s": prox_total / steps,
        "gen_tokens_per_s": tokens_total / max(gen_total, 1e-9),
        "run_dir": str(session.run_dir),
    })
