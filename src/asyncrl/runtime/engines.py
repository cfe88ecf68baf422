"""Config → rollout engine: the settings every mode and every worker builds its engine from."""

from __future__ import annotations

from asyncrl.config import Config
from asyncrl.core.registries import device_type
from asyncrl.policy.model import enable_tf32
from asyncrl.rollout.engine import Engine, EngineSpec, generation_dtype, make_engine

__all__ = ["generation_dtype", "rollout_engine"]


def rollout_engine(cfg: Config, *, model, tokenizer, policy_dir, seed: int, chunked: bool) -> Engine:
    """The engine of ``rollout.engine``; ``chunked``: stop every ``async.chunk_tokens`` tokens for the
    between-chunks hook (interruptible generation)."""
    ro = cfg.rollout
    spec = EngineSpec(max_new_tokens=ro.max_new_tokens, temperature=ro.temperature, seed=seed,
                      chunk_tokens=cfg.async_.chunk_tokens if chunked else None, device=cfg.policy.device,
                      dtype=generation_dtype(cfg), top_p=ro.top_p, top_k=ro.top_k,
                      lm_head_fp32=cfg.policy.lm_head_fp32)
    engine_kwargs = ro.engine_kwargs
    if ro.engine == "vllm" and device_type(cfg.policy.device) == "cuda":
        from asyncrl.runtime.worker import vllm_sizes

        # sync mode's engine too (a worker's kwargs have them already): vLLM sized for the run's
        # sequences, not its defaults, whose start-up profile would eat the memory share
        engine_kwargs = vllm_sizes(cfg, engine_kwargs, getattr(model, "config", None))
    engine = make_engine(ro.engine, spec, model=model, tokenizer=tokenizer, policy_dir=str(policy_dir),
                         engine_kwargs=engine_kwargs)
    if device_type(cfg.policy.device) == "cuda":
        # an engine's set-up may reset the TF32 switch (vLLM's does): in sync mode this process is
        # the trainer's too, and its float32 matmuls keep TF32
        enable_tf32()
    return engine
