"""Config → rollout engine: the settings every mode and every worker builds its engine from."""

from __future__ import annotations

from asyncrl.config import Config
from asyncrl.core.registries import device_type
from asyncrl.policy.model import enable_tf32
from asyncrl.rollout.engine import Engine, EngineSpec, generation_dtype, make_engine

__all__ = ["engine_sequences", "generation_dtype", "rollout_engine", "vllm_sizes"]

# tokens of one forward pass at most (vLLM's max_num_batched_tokens, which sizes its profiling
# pass), unless one sequence is longer: chunked prefill splits longer prompts
BATCHED_TOKENS = 4096


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


def vllm_sizes(cfg, kwargs: dict, model_config=None) -> dict:
    """``kwargs`` with vLLM's ``max_num_seqs``, ``max_model_len`` and ``max_num_batched_tokens`` set
    to what generation needs (:func:`engine_sequences`) where the user did not set them. Left to its
    defaults (1,024 sequences, a 16k-token profiling pass) vLLM's start-up profile would take the
    margin of any share, computed or the user's, and leave no room for a KV cache."""
    kwargs = dict(kwargs)
    seqs, positions = engine_sequences(cfg)
    longest = getattr(model_config, "max_position_embeddings", None)  # vLLM refuses a longer max_model_len
    positions = min(positions, longest) if longest else positions
    kwargs.setdefault("max_num_seqs", seqs)
    kwargs.setdefault("max_model_len", positions)
    kwargs.setdefault("max_num_batched_tokens", max(int(kwargs["max_model_len"]), BATCHED_TOKENS))
    return kwargs


def engine_sequences(cfg) -> tuple[int, int]:
    """(sequences one engine holds at once, positions the longest one reaches): a step's rows, and a
    prompt plus its completion, or plus a whole episode (sampled and observed tokens) for agents."""
    generated = cfg.env.episode_tokens if cfg.env.episodes else cfg.rollout.max_new_tokens
    return cfg.rollout.batch_size, cfg.task.max_prompt_length + generated
