"""Held-out evaluation: mean task reward of completions generated through an engine, the unbiased
pass@k over each problem's samples, and the greedy reward: the mean reward of one temperature-0
answer per problem (docs/training.md).

Engine: a transformers engine over the trained model itself, or, when the run holds a rollout engine
that can generate with other sampling settings in its own process (vLLM in sync and simulated
modes), that engine at the evaluation's settings, with the newest weights loaded.

Precision: with the trained model, on CUDA, when its weights are float32 and the run computes in a
lower precision elsewhere (``rollout.dtype``, else ``trainer.autocast``), the forward passes run
under ``torch.autocast`` in that dtype, as the rollouts and the trainer do; on the CPU they run as
the weights are (docs/models.md). A rollout engine generates in its own dtype (``rollout.dtype``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace

import torch

from asyncrl.policy.model import DTYPES, dtype_name
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout.engine import Engine, EngineSpec, make_engine
from asyncrl.rollout.scoring import rewards_of
from asyncrl.tasks import Problem, Task
from asyncrl.tasks.metrics import pass_at_k

PASS_REWARD = 1.0  # a completion with at least this reward counts as solved for pass@k


def eval_engine(model, tokenizer, *, max_new_tokens: int, temperature: float, seed: int = 0,
                device: str | None = None, top_p: float = 1.0, top_k: int = 0, lm_head_fp32: bool = False) -> Engine:
    """A transformers engine that generates with ``model`` itself (no copy), on its device."""
    param = next(model.parameters())
    spec = EngineSpec(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                      device=str(param.device) if device is None else device, dtype=dtype_name(param.dtype),
                      top_p=top_p, top_k=top_k, lm_head_fp32=lm_head_fp32)
    return make_engine("transformers", spec, model=model, tokenizer=tokenizer)


def autocast_to(device: torch.device | str, dtype: torch.dtype | None):
    """``torch.autocast`` on ``device``'s type in ``dtype``; a context that changes nothing when
    ``dtype`` is None."""
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=dtype)


def eval_autocast_dtype(cfg) -> torch.dtype | None:
    """The dtype evaluation's forward passes autocast to (``cfg``: a Config): on CUDA with float32
    weights, ``rollout.dtype`` when that is a half precision (the rollouts' own), else
    ``trainer.autocast`` (the trainer's); None = as the weights are (always on the CPU)."""
    if torch.device(cfg.policy.device).type != "cuda" or cfg.policy.dtype != "float32":
        return None
    from asyncrl.rollout.engine import generation_dtype

    generation = generation_dtype(cfg)
    if generation != "float32":
        return DTYPES[generation]
    return DTYPES.get(cfg.trainer.autocast)  # "none" is not a dtype


@dataclass
class EvalResult:
    """Completions and rewards per problem (``samples`` each, in ``problems`` order)."""

    problems: list[Problem]
    completions: list[list[str]]
    rewards: list[list[float]]
    # per completion, its answer right in any answer style (tasks with ``answer_correct``); else None
    answers_ok: list[list[bool]] | None = None

    def accuracy(self) -> float:
        """Mean reward over every completion."""
        flat = [r for rs in self.rewards for r in rs]
        return sum(flat) / len(flat)

    def answer_accuracy(self) -> float | None:
        """Share of completions whose answer is right whatever its format; None if the task cannot say."""
        if self.answers_ok is None:
            return None
        flat = [ok for oks in self.answers_ok for ok in oks]
        return sum(flat) / len(flat)

    def passes(self, k: int) -> list[float]:
        """Per problem, the unbiased pass@k estimate from its samples (a sample passes with reward >= 1)."""
        return [pass_at_k(len(rs), sum(r >= PASS_REWARD for r in rs), k) for rs in self.rewards]

    def pass_at(self, k: int) -> float:
        values = self.passes(k)
        return sum(values) / len(values)

    def rows(self, pass_k: list[int]) -> list[dict]:
        """One JSON-ready row per problem: uid, prompt, answer, completions, rewards, pass@k."""
        passes = {k: self.passes(k) for k in pass_k}
        return [{"uid": p.uid, "prompt": p.prompt, "answer": p.answer, "completions": texts, "rewards": rewards,
                 **{f"pass@{k}": passes[k][i] for k in pass_k}}
                for i, (p, texts, rewards) in enumerate(zip(self.problems, self.completions, self.rewards))]


def generate_and_score(engine: Engine, tokenizer, task: Task, problems: list[Problem], *, batch_size: int = 128,
                       samples: int = 1, chat_template: bool = True, rewards=None,
                       max_prompt_length: int | None = None, rollout=None) -> EvalResult:
    """``samples`` completions per problem (one for a greedy engine, temperature 0), scored by
    ``rewards`` (the run's RewardSet: the same total reward training uses) or, when None, the task's
    own reward. ``max_prompt_length``: left-truncate longer prompts (``task.long_prompts=truncate``).
    ``rollout``: episodes (asyncrl.agents.rollout.EpisodeRollout), scored as training scores them; a
    completion is then the episode's text after its prompt."""
    if not problems:
        raise ValueError("evaluate: no problems")
    if engine.spec.temperature == 0:
        samples = 1
    rows = [p for p in problems for _ in range(samples)]
    scorer, texts, rewards = rewards, [], []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        if rollout is not None:
            out = rollout.run(engine, chunk, 1, keep_failed=True)
            texts += out.texts
            rewards += out.batch.rewards.tolist()
            continue
        gen = engine.generate(encode_problems(tokenizer, chunk, 1, chat_template, max_prompt_length))
        chunk_texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
        texts += chunk_texts
        scored = rewards_of(task, chunk_texts, chunk) if scorer is None else scorer.totals(chunk_texts, chunk)
        rewards += [float(r) for r in scored]
    per = range(0, len(rows), samples)
    judge = getattr(task, "answer_correct", None)
    oks = None if judge is None else [judge(text, p) for text, p in zip(texts, rows)]
    return EvalResult(problems, [texts[i:i + samples] for i in per], [rewards[i:i + samples] for i in per],
                      None if oks is None else [oks[i:i + samples] for i in per])


def evaluate(engine: Engine, tokenizer, task: Task, problems: list[Problem], *, batch_size: int = 128,
             samples: int = 1, chat_template: bool = True, rollout=None) -> float:
    """Mean reward in [0, 1] over ``samples`` completions per problem (pass@1 estimated from
    several samples: less noise than one). A greedy engine (temperature 0) needs one sample."""
    return generate_and_score(engine, tokenizer, task, problems, batch_size=batch_size, samples=samples,
                              chat_template=chat_template, rollout=rollout).accuracy()


def eval_metrics(model, tokenizer, task: Task, problems: list[Problem], cfg, rewards=None,
                 engine: Engine | None = None) -> tuple[dict[str, float], EvalResult]:
    """The evaluation of ``cfg`` (a Config) of ``model``: ``eval_reward`` (mean reward),
    ``eval_pass_at_<k>`` for each ``eval.pass_k`` and, with ``eval.greedy``, ``eval_greedy_reward`` (the
    mean reward of one temperature-0 answer per problem: a reward, not a share solved); also the
    sampled completions and their rewards. ``engine``: a rollout engine with ``with_sampling``,
    holding ``model``'s weights, to generate through (None: a transformers engine over ``model``)."""
    ev = cfg.eval
    sampled, greedy, precision = _engines(model, tokenizer, cfg, engine)
    options = {"batch_size": ev.batch_size, "chat_template": cfg.policy.chat_template, "rewards": rewards,
               "max_prompt_length": cfg.task.truncate_to, "rollout": episode_rollout(cfg, rewards, task, tokenizer)}
    device = sampled.spec.device
    try:
        with autocast_to(device, precision):
            result = generate_and_score(sampled, tokenizer, task, problems, samples=ev.samples, **options)
        metrics = {"eval_reward": result.accuracy(), **{f"eval_pass_at_{k}": result.pass_at(k) for k in ev.pass_k}}
        if result.answers_ok is not None:  # accuracy with the answer format factored out
            metrics["eval_answer_acc"] = result.answer_accuracy()
        if greedy is not None:
            with autocast_to(device, precision):
                metrics["eval_greedy_reward"] = generate_and_score(greedy, tokenizer, task, problems,
                                                                   **options).accuracy()
    finally:
        if options["rollout"] is not None:
            options["rollout"].close()  # a harness's endpoint, opened for this evaluation
    return metrics, result


def _engines(model, tokenizer, cfg, engine: Engine | None):
    """(the sampling engine, the greedy one or None without ``eval.greedy``, the autocast dtype):
    views of ``engine`` at the evaluation's settings, or transformers engines over ``model``."""
    ev, length, head = cfg.eval, cfg.rollout.max_new_tokens, cfg.policy.lm_head_fp32
    if engine is not None:  # the rollout engine's own dtype; a whole completion per call
        sampling = replace(engine.spec, max_new_tokens=length, temperature=ev.temperature, top_p=ev.top_p,
                           top_k=ev.top_k, chunk_tokens=None)
        greedy = replace(sampling, temperature=0.0, top_p=1.0, top_k=0)
        return (engine.with_sampling(sampling), engine.with_sampling(greedy) if ev.greedy else None, None)
    sampled = eval_engine(model, tokenizer, max_new_tokens=length, temperature=ev.temperature, seed=cfg.run.seed,
                          top_p=ev.top_p, top_k=ev.top_k, lm_head_fp32=head)
    greedy = eval_engine(model, tokenizer, max_new_tokens=length, temperature=0.0, seed=cfg.run.seed,
                         lm_head_fp32=head) if ev.greedy else None
    return sampled, greedy, eval_autocast_dtype(cfg)


def episode_rollout(cfg, rewards, task, tokenizer):
    """The run's episode rollout when it plays episodes (``env.*``), else None (single turns). Its
    episodes share the engine as ``eval.schedule`` says: by default in rounds, so that an evaluation
    of one start is the same computation every time (under ``ready`` the batches follow the
    environments' timing)."""
    if not cfg.env.episodes:
        return None
    from asyncrl.agents.rollout import EpisodeRollout
    from asyncrl.rewards import RewardSet

    return EpisodeRollout(cfg, rewards if rewards is not None else RewardSet.for_task(task), tokenizer,
                          schedule=cfg.eval.schedule)


def cli_report(metrics: dict[str, float], result: EvalResult, cfg) -> dict:
    """The scores of ``asyncrl eval`` under their reporting names: eval_reward, pass@k, greedy_reward."""
    report = {"eval_reward": metrics["eval_reward"]}
    if "eval_answer_acc" in metrics:
        report["answer_acc"] = metrics["eval_answer_acc"]
    report.update({f"pass@{k}": metrics[f"eval_pass_at_{k}"] for k in cfg.eval.pass_k})
    if "eval_greedy_reward" in metrics:
        report["greedy_reward"] = metrics["eval_greedy_reward"]
    report.update(n_problems=len(result.problems), samples=len(result.rewards[0]),
                  temperature=cfg.eval.temperature)
    return report


def summary_lines(report: dict) -> list[str]:
    """A few human-readable lines of an ``asyncrl eval`` report."""
    lines = [f"eval: {report['n_problems']} problems x {report['samples']} samples "
             f"(temperature {report['temperature']})"]
    lines += [f"  {key:<12} {value:.4f}" for key, value in report.items()
              if key not in ("n_problems", "samples", "temperature")]
    return lines


def write_outputs(out_dir, report: dict, result: EvalResult, pass_k: list[int]) -> list:
    """``<out_dir>/eval.json`` (the report) and ``<out_dir>/problems.jsonl`` (a row per problem);
    returns both paths."""
    import json
    from pathlib import Path

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "eval.json").write_text(json.dumps(report, indent=2) + "\n")
    with open(out / "problems.jsonl", "w") as f:
        for row in result.rows(pass_k):
            f.write(json.dumps(row) + "\n")
    return [out / "eval.json", out / "problems.jsonl"]
