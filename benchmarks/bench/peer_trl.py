"""``python -m benchmarks peer-trl``: TRL's ``GRPOTrainer`` (synchronous, no vLLM) on exactly what asyncrl
trains: the same warm-started model and tokenizer, task, prompt order, batch sizes, sampling settings,
optimizer and evaluation function. A peer baseline for speed and learning curves.

    python -m benchmarks.bench.peer_trl [--config FILE] [dotted.key=value ...]

Same config system as ``asyncrl train``; bad input exits 2 with one line on stderr. Writes
``<run.out_dir>/<run.name>/`` with ``config.yaml``, ``trl_args.json`` (the TRL options used),
``metrics.jsonl`` (one record per asyncrl-equivalent step) and ``summary.json``, and prints the summary
as JSON on the last line of stdout.

One asyncrl step = one generation batch of ``prompts_per_step × samples_per_prompt`` completions from
the current weights, then ``trainer.n_minibatches`` AdamW updates. In TRL terms (trl 1.16,
``trl/trainer/grpo_config.py`` ``__post_init__`` and ``grpo_trainer.py`` ``_prepare_inputs``): a
generation batch of ``per_device_train_batch_size × steps_per_generation`` completions is generated once
every ``steps_per_generation × num_iterations`` optimizer steps and split into ``steps_per_generation``
slices, one optimizer step each. So ``per_device_train_batch_size = batch / n_minibatches``,
``steps_per_generation = n_minibatches``, ``gradient_accumulation_steps = 1``, ``num_iterations = 1``,
``max_steps = n_minibatches × trainer.steps``. See :func:`trl_options` for every option and why.

Where each metrics.jsonl field comes from (k = asyncrl-equivalent step = TRL optimizer steps
(k-1)·n_minibatches+1 .. k·n_minibatches; ``logging_steps = n_minibatches`` so TRL logs exactly once per k):
  reward_mean       our reward function (TRL calls it once per generation batch): mean of that step's
                    completions, scored by the run's reward functions exactly as asyncrl scores
  loss              TRL log "loss": mean of the n_minibatches minibatch losses (Trainer averages
                    ``tr_loss`` over the logging window)
  entropy           TRL log "entropy": per-minibatch token-mean entropy, averaged over the window
  clipped_tokens    TRL log "clip_ratio/region_mean": fraction of tokens whose ratio is clipped
  grad_norm_last    TRL log "grad_norm": pre-clip norm of the LAST update of the step only
  completion_len_mean  TRL log "completions/mean_length"
  frac_zero_adv_groups TRL log "frac_reward_zero_std"
  gen_time_s        wall time of TRL's ``_generate_single_turn`` (``model.generate``) for the step
  rollout_time_s    wall time of TRL's ``_generate_and_score_completions``: generation, reward,
                    the no-grad old-log-prob forward pass, advantages
  step_time_s       wall time from the end of the previous step (after its eval) to TRL's log call of
                    this step: generation + n_minibatches updates (+ TRL bookkeeping)
  elapsed_s         seconds since the run started
  eval_reward       ``asyncrl.training.evaluation.evaluate`` (as the loop's Evaluations) on eval steps
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable
from datetime import datetime

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach the hub (beta=0: no reference model is built)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from transformers import TrainerCallback  # noqa: E402

from asyncrl.config import Config, ConfigError  # noqa: E402
from asyncrl.runtime.validate import load_run_config  # noqa: E402

MODE = "trl-grpo"
# Token-mean over each minibatch, like asyncrl's ``agg="token_mean"``: TRL 1.16 ``_compute_loss``,
# loss_type "bnpo": ``(per_token_loss * mask).sum() / mask.sum()`` over the local batch, divided by
# ``current_gradient_accumulation_steps`` (= 1 here). "dapo" (TRL's default) would instead divide by
# the token count of the whole generation batch / steps_per_generation, i.e. weight each minibatch by
# its token count relative to the step average; "grpo" is a per-sequence mean (length bias).
LOSS_TYPE = "bnpo"


class PeerError(Exception):
    """A missing dependency or unusable setup: one line on stderr, exit 2."""


def _missing_trl() -> str:
    try:
        import torch

        torch_version = torch.__version__.split("+")[0]
    except ImportError:  # pragma: no cover
        torch_version = "<your torch version>"
    return f'asyncrl: the peer-trl suite needs TRL: pip install "asyncrl[peers]" torch=={torch_version}'


def trl_options(cfg: Config, output_dir: str) -> dict:
    """GRPOConfig keyword arguments that reproduce one asyncrl step per generation batch."""
    ro, tr = cfg.rollout, cfg.trainer
    return {
        "output_dir": output_dir,
        # batch geometry: one generation batch of B = P × G completions per asyncrl step, split into
        # n_minibatches slices of B / n_minibatches, one AdamW update each (see the module docstring)
        "per_device_train_batch_size": ro.batch_size // tr.n_minibatches,
        "num_generations": ro.samples_per_prompt,
        "steps_per_generation": tr.n_minibatches,  # generation_batch_size = 16 × 4 = 64 (derived)
        "gradient_accumulation_steps": 1,
        "num_iterations": 1,  # each generation batch is used once (asyncrl: one pass)
        "max_steps": tr.n_minibatches * tr.steps,
        # objective: PPO-clip GRPO, no KL (asyncrl has none; beta=0 also skips the reference model)
        "beta": 0.0,
        "epsilon": 0.2,  # epsilon_high defaults to epsilon: symmetric clip, as asyncrl's default
        "loss_type": LOSS_TYPE,
        "scale_rewards": "group",  # (r - mean_g) / (std_g + 1e-4), Bessel std (asyncrl: + 1e-6)
        "importance_sampling_level": "token",
        "mask_truncated_completions": False,  # asyncrl trains on truncated completions too
        "top_entropy_quantile": 1.0,
        # sampling: plain temperature sampling (top_k=0 / top_p=1.0 add no logits warper in
        # transformers' _get_logits_processor), max_new_tokens, no repetition penalty
        "temperature": ro.temperature,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": None,
        "repetition_penalty": 1.0,
        "max_completion_length": ro.max_new_tokens,
        "use_vllm": False,
        # optimizer: torch AdamW (asyncrl's), constant LR, no warmup, clip 1.0
        "learning_rate": tr.lr,
        "optim": "adamw_torch",  # transformers 5 defaults to adamw_torch_fused; asyncrl uses torch.optim.AdamW
        "adam_beta1": tr.beta1,
        "adam_beta2": tr.beta2,
        "adam_epsilon": 1e-8,  # torch.optim.AdamW default, as asyncrl
        "weight_decay": tr.weight_decay,
        "max_grad_norm": tr.grad_clip,
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
        # data: our own prompt order (asyncrl's PromptStream), not TRL's shuffle
        "shuffle_dataset": False,
        "remove_unused_columns": False,
        "dataloader_num_workers": 0,
        # hardware: CPU fp32 (bf16 defaults on in GRPOConfig), no gradient checkpointing (TRL default
        # on; asyncrl's policy.gradient_checkpointing default is off)
        "use_cpu": cfg.policy.device == "cpu",
        "bf16": False,
        "fp16": False,
        "gradient_checkpointing": cfg.policy.gradient_checkpointing,
        "disable_dropout": False,
        # bookkeeping: log once per asyncrl step, nothing saved, no external loggers
        "logging_strategy": "steps",
        "logging_steps": tr.n_minibatches,
        "logging_first_step": False,
        "save_strategy": "no",
        "eval_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "log_completions": False,
        "seed": cfg.run.seed,
        "data_seed": cfg.run.seed,
    }


def prompt_for(tokenizer, text: str, chat_template: bool):
    """The dataset "prompt" that makes TRL tokenize ``text`` exactly as ``encode_prompt`` does: a
    conversation (TRL applies the chat template with add_generation_prompt=True) when encode_prompt
    would use the template, else the plain string (TRL calls ``tokenizer(text=prompts)`` with the
    default add_special_tokens=True, so a post-processor BOS is added once, as in encode_prompt)."""
    if chat_template and getattr(tokenizer, "chat_template", None):
        return [{"role": "user", "content": text}]
    return text


def check_prompt_ids(trainer, tokenizer, texts: list[str], chat_template: bool) -> None:
    """Fail loudly if TRL would feed the model other prompt ids than asyncrl does."""
    from asyncrl.policy.prompts import encode_prompt

    ours = [encode_prompt(tokenizer, t, chat_template) for t in texts]
    theirs, _, _ = trainer._tokenize_prompts([prompt_for(tokenizer, t, chat_template) for t in texts])
    theirs = [list(map(int, ids)) for ids in theirs]
    if theirs != ours:
        bad = next(i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b)
        raise PeerError(f"TRL tokenizes prompt {bad} differently from encode_prompt: "
                        f"{theirs[bad][:8]}... vs {ours[bad][:8]}...")


class _PerStep(TrainerCallback):
    """One metrics record per asyncrl-equivalent step, built when TRL logs (every n_minibatches):
    rewards from our scorer, TRL's logged statistics, the step's timers, and the eval when due.
    ``extra(record, logs, timers) -> dict``: more fields of the record, read before the timers restart."""

    def __init__(self, session, evaluations, step_rewards: list[list[float]], timers: dict[str, float],
                 extra=None):
        self.session, self.evaluations, self.step_rewards, self.timers = session, evaluations, step_rewards, timers
        self.extra = extra
        self.per_step = session.cfg.trainer.n_minibatches
        self.totals = {key: 0.0 for key in timers}
        self.boundary = time.perf_counter()
        self.written = 0
        self.threads_seen = None

    def on_train_begin(self, args, state, control, **kwargs):
        import torch

        self.threads_seen = torch.get_num_threads()
        self.boundary = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        logs = logs or {}
        if "loss" not in logs or state.global_step % self.per_step:
            return
        step = state.global_step // self.per_step
        if step <= self.written:
            return
        rewards = self.step_rewards[step - 1] if len(self.step_rewards) >= step else []
        record = {
            "reward_mean": sum(rewards) / len(rewards) if rewards else logs.get("reward"),
            "trl_reward": logs.get("reward"),
            "entropy": logs.get("entropy"),
            "clipped_tokens": logs.get("clip_ratio/region_mean"),
            "loss": logs["loss"],
            "grad_norm_last": logs.get("grad_norm"),
            "completion_len_mean": logs.get("completions/mean_length"),
            "frac_zero_adv_groups": logs.get("frac_reward_zero_std"),
            "gen_time_s": self.timers["gen"],
            "rollout_time_s": self.timers["rollout"],
            "step_time_s": time.perf_counter() - self.boundary,
        }
        if self.extra is not None:
            record.update(self.extra(record, logs, self.timers))
        for key in self.timers:
            self.totals[key] += self.timers[key]
            self.timers[key] = 0.0
        if self.evaluations.due(step):
            record["eval_reward"] = self.evaluations.run(step)
        record["elapsed_s"] = time.time() - self.session.started
        self.session.metrics.write(step, record)
        self.session.progress.update(step, reward=record["reward_mean"], eval_acc=record.get("eval_reward"))
        self.written = step
        self.boundary = time.perf_counter()  # the next step's clock starts after this step's eval


def _dataset(session):
    """The prompts of asyncrl's step k, in asyncrl's order (PromptStream with the run seed): TRL's
    sampler with shuffle_dataset=False walks the rows in order, prompts_per_step per generation batch."""
    from datasets import Dataset

    from asyncrl.rollout.prompts import PromptStream

    cfg, problems = session.cfg, session.train_problems
    stream = PromptStream(problems, cfg.rollout.prompts_per_step, seed=cfg.run.seed)
    index_of = {id(p): i for i, p in enumerate(problems)}
    rows = [{"prompt": prompt_for(session.tokenizer, p.prompt, cfg.policy.chat_template),
             "problem_index": index_of[id(p)]}
            for _ in range(cfg.trainer.steps) for p in stream.next()]
    return Dataset.from_list(rows) if rows else None


def run(cfg: Config) -> dict:
    """Train with TRL's GRPOTrainer inside an asyncrl session (model, task, metrics, summary) with its evaluations."""
    try:
        import trl
        from trl import GRPOConfig, GRPOTrainer
    except ImportError:
        raise PeerError(_missing_trl()) from None
    import torch
    from transformers import PrinterCallback

    from asyncrl.config.threads import trainer_threads
    from asyncrl.core.progress import TrainProgress
    from asyncrl.runtime.evaluate import Evaluations
    from asyncrl.runtime.loop import open_session

    # TRL is one process: policy.torch_threads 0 (auto) gives it every core, as it does asyncrl's sync mode
    threads = trainer_threads(cfg)
    torch.set_num_threads(threads)
    steps = cfg.trainer.steps
    if cfg.run.name is None:
        cfg.run.name = f"{MODE}-s{cfg.run.seed}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    session = open_session(cfg)
    evaluations = Evaluations(session)
    session.progress = TrainProgress(steps, MODE, enabled=cfg.run.progress)
    step_rewards: list[list[float]] = []

    def task_reward(prompts, completions, problem_index, **_) -> list[float]:
        texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
        rewards = session.rewards.totals(texts, [session.train_problems[i] for i in problem_index])
        step_rewards.append(rewards)
        return rewards

    options = trl_options(cfg, str(session.run_dir / "trl"))
    (session.run_dir / "trl_args.json").write_text(
        json.dumps({"trl_version": trl.__version__, **options}, indent=2))
    timers = {"gen": 0.0, "rollout": 0.0}
    callback = _PerStep(session, evaluations, step_rewards, timers)
    train_wall = 0.0
    with session.progress as progress:
        eval_acc = evaluations.run(0)
        progress.update(0, eval_acc=eval_acc, elapsed_s=session.elapsed_s())
        if steps > 0:
            trainer = GRPOTrainer(model=session.model, reward_funcs=[task_reward], args=GRPOConfig(**options),
                                  train_dataset=_dataset(session), processing_class=session.tokenizer,
                                  callbacks=[callback])
            trainer.remove_callback(PrinterCallback)  # stdout carries only the summary line
            torch.set_num_threads(threads)
            check_prompt_ids(trainer, session.tokenizer, [p.prompt for p in session.train_problems[:256]],
                             cfg.policy.chat_template)
            _time_method(trainer, "_generate_single_turn", timers, "gen")
            _time_method(trainer, "_generate_and_score_completions", timers, "rollout")
            t0 = time.perf_counter()
            trainer.train()
            train_wall = time.perf_counter() - t0 - evaluations.seconds
            if callback.written != steps:
                raise RuntimeError(f"peer-trl: TRL ran {trainer.state.global_step} optimizer steps, "
                                   f"{callback.written} asyncrl steps recorded, expected {steps}")
    n = max(steps, 1)
    return session.finish(steps, evaluations.summary(), {
        "mode": MODE, "loss": f"trl-{LOSS_TYPE}", "prox": None,
        "gen_time_per_step_s": callback.totals["gen"] / n,
        "rollout_time_per_step_s": callback.totals["rollout"] / n,
        "torch_threads": callback.threads_seen or threads, "trl_version": trl.__version__,
    }, train_wall)


def _time_method(obj, name: str, timers: dict, key: str) -> None:
    """Accumulate the wall time of ``obj.name(...)`` into ``timers[key]`` (skipped if TRL renamed it)."""
    method = getattr(obj, name, None)
    if method is None:
        return

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return method(*args, **kwargs)
        finally:
            timers[key] += time.perf_counter() - t0

    setattr(obj, name, timed)


def peer_main(prog: str, config_help: str, run: Callable[[Config], dict], argv: list[str] | None = None) -> int:
    """A TRL peer's command line: check TRL is there, quiet its logging, run, print the summary as JSON."""
    parser = argparse.ArgumentParser(prog=prog, description=(sys.modules[run.__module__].__doc__ or "").splitlines()[0])
    parser.add_argument("--config", help=config_help)
    parser.add_argument("overrides", nargs="*", metavar="dotted.key=value")
    args = parser.parse_args(argv)
    try:
        import trl  # noqa: F401
    except ImportError:
        print(_missing_trl(), file=sys.stderr)
        return 2
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    # transformers 5.2x deprecates `gradient_checkpointing` (TRL 1.16 still sets it): noise only
    warnings.filterwarnings("ignore", category=FutureWarning)
    try:
        summary = run(load_run_config(args.config, args.overrides))
    except (ConfigError, PeerError) as err:
        print(str(err) if str(err).startswith("asyncrl:") else f"asyncrl: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("asyncrl: interrupted", file=sys.stderr)
        return 130
    print(json.dumps(summary))
    return 0


def main(argv: list[str] | None = None) -> int:
    return peer_main("python -m benchmarks.bench.peer_trl", "YAML config file", run, argv)


if __name__ == "__main__":
    sys.exit(main())
