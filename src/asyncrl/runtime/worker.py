"""Rollout worker process: pulls work units, generates with the newest published weights, scores,
and returns version-tagged groups. Started once and kept (spawning costs seconds of imports and
model build).

Interruptible generation: between decode chunks of ``chunk_tokens`` tokens the worker checks the
published version; if newer, it copies the weights, re-runs the prefix (prompt + tokens so far)
with them, and continues the same sequences, so later tokens carry the new version.

With ``rollout.engine=vllm`` the worker keeps a CPU copy of the plain model only as the landing
place of pulled weights, generates with :class:`asyncrl.rollout.vllm_engine.VLLMEngine` (in
process) and, between its chunks, pulls newer weights and reloads them into vLLM in place; the
continuation re-prefills prompt + tokens so far, as above.
"""

from __future__ import annotations

import os
import queue
import time
import traceback
from dataclasses import dataclass

import torch

from asyncrl.types import batch_to_numpy


@dataclass
class WorkUnit:
    """Generate ``n`` samples for each problem; rows are problems × n in order."""

    unit_id: int
    problem_indices: list[int]  # indices into the task's train split
    group_ids: list[int]
    n: int


@dataclass
class WorkerSpec:
    """Everything a worker needs to rebuild its world in a fresh process."""

    worker_id: int
    config: dict
    policy_dir: str
    seed: int
    chunk_tokens: int
    interruptible: bool
    cpu: int | None = None  # CPU to pin this process to, or None


def _generate(model, tokenizer, shared, unit_prompts, spec, rollout, generator, local_version):
    from asyncrl.policy.sampling import decode, left_pad, prefill, to_generation

    ids, mask = left_pad(unit_prompts, tokenizer.pad_token_id)
    state = prefill(model, ids, mask)
    kw = dict(temperature=rollout.temperature, eos_id=tokenizer.eos_token_id,
              pad_id=tokenizer.pad_token_id, generator=generator)
    chunk = spec.chunk_tokens if spec.interruptible else rollout.max_new_tokens
    updates = 0
    while state.n_generated < rollout.max_new_tokens and not bool(state.finished.all()):
        n = min(chunk, rollout.max_new_tokens - state.n_generated)
        state = decode(model, state, n, version=local_version, **kw)
        if (spec.interruptible and shared.latest() > local_version
                and state.n_generated < rollout.max_new_tokens and not bool(state.finished.all())):
            local_version = shared.pull(model)
            state = prefill(model, state.prompt_ids, state.prompt_mask, state.tokens, state.logps,
                            state.versions, state.finished)
            updates += 1
    return to_generation(state), local_version, updates


def pin_to_cpu(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


class RolloutWorker:
    """The state of one rollout worker, wherever it runs (a local process or a Ray actor).

    ``weights`` is the weight channel: ``latest() -> int`` and ``pull(model) -> int``.
    """

    def __init__(self, spec: WorkerSpec, weights):
        from transformers.utils import logging as hf_logging

        from asyncrl.config import Config
        from asyncrl.config_loader import from_dict
        from asyncrl.policy.model import load_policy_for
        from asyncrl.tasks import build_task

        torch.set_num_threads(1)
        hf_logging.disable_progress_bar()
        self.spec = spec
        self.weights = weights
        self.cfg = from_dict(Config, spec.config)
        self.engine = None
        if self.cfg.rollout.engine == "vllm":
            self.model, self.tokenizer = self._start_vllm(spec)
        else:
            self.model, self.tokenizer = load_policy_for(self.cfg.policy, spec.policy_dir)
        self.model.eval()
        self.task = build_task(self.cfg.task.name, self.cfg.task.params())
        self.problems = self.task.problems("train")
        self.generator = torch.Generator().manual_seed(spec.seed)
        self.version = weights.pull(self.model)
        if self.engine is not None:
            self.engine.update_weights(self.model, self.version)

    def _start_vllm(self, spec: WorkerSpec):
        """A vLLM engine on the policy directory, plus a CPU staging model that the weight channel
        pulls into (both channels, shared memory and Ray, fill an ``nn.Module``)."""
        from asyncrl.policy.model import load_policy
        from asyncrl.rollout.vllm_engine import VLLMEngine

        ro, policy = self.cfg.rollout, self.cfg.policy
        model, tokenizer = load_policy(spec.policy_dir, "cpu", policy.dtype)
        self.engine = VLLMEngine(spec.policy_dir, tokenizer, max_new_tokens=ro.max_new_tokens,
                                 temperature=ro.temperature, seed=spec.seed, chat_template=policy.chat_template,
                                 dtype=policy.dtype, chunk_tokens=spec.chunk_tokens if spec.interruptible else None,
                                 **ro.vllm_kwargs)
        return model, tokenizer

    def _pull(self) -> int:
        self.version = self.weights.pull(self.model)
        if self.engine is not None:
            self.engine.update_weights(self.model, self.version)
        return self.version

    def _generate_vllm(self, prompts: list[list[int]]):
        updates = 0

        def between_chunks() -> None:
            nonlocal updates
            if self.weights.latest() > self.engine.version:
                self._pull()
                updates += 1

        gen = self.engine.generate_ids(prompts, self.version,
                                       between_chunks=between_chunks if self.spec.interruptible else None)
        return gen, self.engine.version, updates

    def run(self, unit: WorkUnit) -> dict:
        from asyncrl.policy.prompts import encode_prompt
        from asyncrl.rollout.scoring import score

        started = time.perf_counter()
        if self.weights.latest() > self.version:
            self._pull()
        chosen = [self.problems[i] for i in unit.problem_indices]
        prompts = [encode_prompt(self.tokenizer, p.prompt, self.cfg.policy.chat_template)
                   for p in chosen for _ in range(unit.n)]
        if self.engine is not None:
            gen, self.version, updates = self._generate_vllm(prompts)
        else:
            with torch.no_grad():
                gen, self.version, updates = _generate(self.model, self.tokenizer, self.weights, prompts,
                                                       self.spec, self.cfg.rollout, self.generator, self.version)
        batch = score(gen, chosen, unit.n, self.task, self.tokenizer)
        batch.group_ids = torch.tensor(unit.group_ids).repeat_interleave(unit.n)
        return {"unit_id": unit.unit_id, "batch": batch, "gen_time_s": time.perf_counter() - started,
                "weight_updates": updates}


def worker_main(spec: WorkerSpec, shared, work_q, result_q, stop) -> None:
    """Process entry point. Sends ("ready", id), ("result", id, payload) or ("error", id, text)."""
    try:
        pin_to_cpu(spec.cpu)
        worker = RolloutWorker(spec, shared)
        result_q.put(("ready", spec.worker_id, None))
        while not stop.is_set():
            try:
                unit: WorkUnit = work_q.get(timeout=0.2)
            except queue.Empty:
                continue
            payload = worker.run(unit)
            payload["batch"] = batch_to_numpy(payload["batch"])
            result_q.put(("result", spec.worker_id, payload))
    except Exception:  # report, then die: the pool restarts us
        result_q.put(("error", spec.worker_id, traceback.format_exc()))
        raise
