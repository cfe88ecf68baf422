"""Held-out evaluation: mean task reward of completions generated through an engine."""

from __future__ import annotations

from asyncrl.policy.model import dtype_name
from asyncrl.policy.prompts import encode_problems
from asyncrl.rollout.engine import Engine, EngineSpec, make_engine
from asyncrl.rollout.scoring import rewards_of
from asyncrl.tasks import Problem, Task


def eval_engine(model, tokenizer, *, max_new_tokens: int, temperature: float, seed: int = 0,
                device: str | None = None) -> Engine:
    """A transformers engine that generates with ``model`` itself (no copy), on its device."""
    param = next(model.parameters())
    spec = EngineSpec(max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                      device=str(param.device) if device is None else device, dtype=dtype_name(param.dtype))
    return make_engine("transformers", spec, model=model, tokenizer=tokenizer)


def evaluate(engine: Engine, tokenizer, task: Task, problems: list[Problem], *, batch_size: int = 128,
             samples: int = 1, chat_template: bool = True) -> float:
    """Mean reward in [0, 1] over ``samples`` completions per problem (pass@1 estimated from
    several samples: less noise than one). A greedy engine (temperature 0) needs one sample."""
    if not problems:
        raise ValueError("evaluate: no problems")
    if engine.spec.temperature == 0:
        samples = 1
    rows = [p for p in problems for _ in range(samples)]
    total = 0.0
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        gen = engine.generate(encode_problems(tokenizer, chunk, 1, chat_template))
        texts = tokenizer.batch_decode(gen.completion_ids, skip_special_tokens=True)
        total += sum(rewards_of(task, texts, chunk))
    return total / len(rows)
