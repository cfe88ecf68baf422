"""One training step: advantages, proximal log-probs, ``n_minibatches`` AdamW updates, version += 1.

The objective and the proximal policy are reached only through the ``asyncrl.objectives``
registries: this file never branches on the loss's or the proximal strategy's name (a strategy
declares whether it needs the extra forward pass, and the trainer runs it). Non-finite losses or
gradients skip the update (counted), so NaN/inf never reaches the weights.

Device: the trainer works on its model's device; a batch moves there once, at the entrance of
:meth:`Learner.step`. Mixed precision (``trainer.autocast``): the weights and the optimizer stay
in the policy dtype (fp32 master weights); forward passes run under ``torch.autocast``; float16
adds a dynamic loss scale (``torch.amp.GradScaler``), whose overflow steps count as skipped updates.

Memory: ``trainer.micro_batch_size`` splits each minibatch into forward/backward passes whose
gradients add up (the losses get the minibatch's token and sequence counts, so the update is the
minibatch's); logged statistics are those of the whole minibatch. ``trainer.logits_chunk`` bounds
the LM head's memory (asyncrl.policy.logprobs).

Data parallelism stays outside the algorithm: the trainer is given a strategy
(asyncrl.training.parallel) that says which micro-batches this process runs, scales their losses
and gathers the minibatch's log-probs. The default, one process, changes nothing; torchrun's ranks
get asyncrl.training.data_parallel.DataParallel.

Statistics: each minibatch update yields one value per statistic (over the whole minibatch); the
step reports, per key, the largest of its updates' values for a key ending in ``_max``, the smallest
for ``_min`` and the mean otherwise, NaN values left out (asyncrl.training.steps.reduce_updates).
``ess_frac_min`` is the smallest update's ESS fraction and ``ess_frac_first`` the first's.

Learning rate: ``trainer.lr_schedule`` (asyncrl.training.lr_schedule) sets each step's lr; VCPO's ESS rule
scales that lr for one minibatch update and restores it. Optional KL penalty to a frozen reference
(``trainer.kl_coef``, asyncrl.training.reference): one extra no-grad forward per minibatch.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections import defaultdict
from functools import partial
from pathlib import Path

import torch

from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.objectives.micro_batching import check_micro_batching
from asyncrl.objectives import ProxPlan, episode_advantages, policy_loss, prox_strategy
from asyncrl.policy.logprobs import completion_logprobs
from asyncrl.stability.ess_lr import lr_scale, minibatch_ess, scaled_lr, sequence_log_weights
from asyncrl.stability.opob import opob_advantages, score_grad_sq_norms
from asyncrl.training.lr_schedule import build_scheduler, check_schedule, schedule_key
from asyncrl.training.parallel import SingleProcess
from asyncrl.training.reference import ReferencePolicy, kl_penalty
from asyncrl.training.steps import (MinibatchParts, advantage_stats, check_hparams, logp_mismatch, micro_bounds,
                                   prox_error_stats, reduce_updates)
from asyncrl.types import Batch

AUTOCAST_DTYPES = {"none": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Learner:
    """One process's learner: owns the trained model, its optimizer and the policy version counter,
    and makes one update of them per :meth:`step`. Not the public ``asyncrl.Trainer``
    (asyncrl.api), which runs a whole training run and builds one of these inside it."""

    def __init__(self, model: torch.nn.Module, cfg: TrainerConfig, loss: LossConfig, *,
                 temperature: float = 1.0, seed: int = 0, reference: ReferencePolicy | None = None,
                 lm_head_fp32: bool = False, parallel: SingleProcess | None = None):
        self.model = model
        # who trains which rows of a minibatch (asyncrl.training.parallel): one process, or torchrun's
        # ranks each with their share (asyncrl.training.data_parallel)
        self.parallel = parallel or SingleProcess()
        self.reference = reference if cfg.kl_coef > 0 else None  # frozen starting policy of the KL penalty
        self.cfg = cfg
        self.loss = loss
        self.temperature = temperature
        self.lm_head_fp32 = lm_head_fp32  # the LM head's matmul in fp32 under autocast
        self.version = 0
        self.device = next(model.parameters()).device
        check_hparams(cfg.grad_clip, [(cfg.lr, (cfg.beta1, cfg.beta2), cfg.weight_decay)])
        check_micro_batching(loss, cfg, ranks=self.parallel.size)
        # fused AdamW: one kernel for all parameters on CUDA (the foreach path elsewhere, and for
        # sharded parameters)
        fused = {"fused": True} if self.device.type == "cuda" and not self.parallel.split else {}
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay, **fused)
        self.scheduler = build_scheduler(self.optimizer, cfg)
        self.rng = torch.Generator().manual_seed(seed)  # minibatch permutation, sampled on the CPU
        self.autocast_dtype = AUTOCAST_DTYPES[cfg.autocast]
        self.scaler = self._grad_scaler()
        self.prox = prox_strategy(cfg.prox, cfg.prox_params)  # how each step obtains log π_prox (asyncrl.objectives.prox)

    def _grad_scaler(self) -> torch.amp.GradScaler | None:
        """float16 autocast: a dynamic loss scale, so small gradients do not flush to zero in fp16."""
        if self.autocast_dtype != torch.float16:
            return None
        if any(p.dtype == torch.float16 for p in self.model.parameters() if p.requires_grad):
            raise ValueError("trainer.autocast: float16 needs float32 trained weights (policy.dtype=float32) "
                             "to unscale the gradients in; got float16 parameters")
        if self.device.type == "cuda":
            warnings.warn("trainer.autocast=float16: with left-padded prompts the attention gradients of "
                          "padded rows overflow in float16 and updates are skipped (see skipped_updates); "
                          "bfloat16 has no such problem (docs/training.md)", stacklevel=2)
        return torch.amp.GradScaler(self.device.type)

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def logprobs(self, batch: Batch, with_entropy: bool = False, rows_per_forward: int = 0):
        """(logp [B, T], entropy [B, T] or None) of ``batch`` under the trained model; with
        ``rows_per_forward`` > 0 in forward passes of at most that many rows, concatenated."""
        rows = len(batch) if rows_per_forward <= 0 else rows_per_forward
        parts = [self._forward(batch.rows(lo, hi), with_entropy) for lo, hi in micro_bounds(len(batch), rows)]
        if len(parts) == 1:
            return parts[0]
        entropy = torch.cat([part[1] for part in parts]) if with_entropy else None
        return torch.cat([part[0] for part in parts]), entropy

    def _forward(self, batch: Batch, with_entropy: bool):
        # a sharded model computes them itself, inside its FSDP root (asyncrl.training.fsdp)
        logprobs = getattr(self.model, "completion_logprobs", None) or partial(completion_logprobs, self.model)
        with self._autocast():
            return logprobs(batch.prompt_ids, batch.prompt_mask, batch.completion_ids, batch.completion_mask,
                            temperature=self.temperature, with_entropy=with_entropy,
                            logits_chunk=self.cfg.logits_chunk, lm_head_fp32=self.lm_head_fp32,
                            completion_attn=batch.completion_attention)

    def _prox_setup(self, batch: Batch, sizes: list[int]) -> tuple[ProxPlan, torch.Tensor | None, bool, float, float]:
        """The step's proximal plan, after the extra no-grad forward pass (in micro-batches, or
        minibatches) when the strategy needs the exact log-probs or trainer.prox_error measures the
        approximation on this step. Returns (plan, exact log-probs [B, T] when that pass ran,
        measured?, prox s, measurement s)."""
        cfg = self.cfg
        measure = cfg.prox_error and self.prox.approximate and self.version % cfg.prox_error_every == 0
        exact_logp, error_time = None, 0.0
        t0 = time.perf_counter()
        if self.prox.needs_forward or measure:
            with torch.no_grad():
                exact_logp = self.parallel.exact_logprobs(batch, sizes, cfg.micro_batch_size, self.logprobs)
            if measure:  # the measurement is not the approximation's cost
                error_time, t0 = time.perf_counter() - t0, time.perf_counter()
        plan = self.prox.plan(batch.behav_logp, batch.versions, self.version, exact_logp)
        return plan, exact_logp, measure, time.perf_counter() - t0, error_time

    def step(self, batch: Batch) -> dict[str, float]:
        """Train on ``batch`` (any number of versions behind) and advance the version by one."""
        cfg = self.cfg
        started = time.perf_counter()
        batch = batch.to(self.device)
        self.model.train()
        step_lr = self.optimizer.param_groups[0]["lr"]
        batch.advantages = self._advantages(batch)
        perm = torch.randperm(len(batch), generator=self.rng).to(self.device)
        batch = batch.select(perm)  # minibatch order: minibatch i is a contiguous block of rows (views)
        sizes = [len(index) for index in perm.chunk(cfg.n_minibatches)]
        starts = [sum(sizes[:i]) for i in range(len(sizes))]
        plan, exact_logp, measure, prox_time, error_time = self._prox_setup(batch, sizes)
        stats: dict[str, list[float]] = defaultdict(list)
        mismatch = None if exact_logp is None else logp_mismatch(exact_logp, batch, self.version)
        for start, size in zip(starts, sizes):
            mb = batch.rows(start, start + size)
            parts = self._train_minibatch(mb, start, plan, stats)
            prox_time += parts.prox_time
            if measure:
                for key, value in prox_error_stats(exact_logp[start:start + size], parts.prox_logp,
                                                   mb.completion_mask, self.version - mb.versions).items():
                    stats[key].append(value)
            if mismatch is None:  # the first minibatch's log-probs are those before any update
                mismatch = logp_mismatch(parts.logp, mb, self.version)
        self.version += 1
        with warnings.catch_warnings():  # a step whose updates were all skipped still moves the schedule on
            warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before")
            self.scheduler.step()  # the next step's lr
        out = reduce_updates({**stats, "ess_frac_min": stats["ess_frac"]})  # *_max: a maximum, *_min: a minimum
        out["skipped_updates"] = float(sum(not math.isfinite(g) for g in stats["grad_norm"]))
        out["ess_frac_first"] = stats["ess_frac"][0]  # before this step's first update: staleness alone
        out["lr"] = step_lr
        out["lr_effective"] = step_lr * out["lr_scale"]
        out["logp_mismatch"] = mismatch
        out.update(advantage_stats(batch))
        out["prox_time_s"] = prox_time
        if measure:
            out["prox_error_time_s"] = error_time
        out["train_time_s"] = time.perf_counter() - started
        return out

    def _train_minibatch(self, mb: Batch, start: int, plan: ProxPlan, stats: dict[str, list[float]]
                         ) -> MinibatchParts:
        """One optimizer update on minibatch ``mb`` (rows ``start:`` of the step's batch): forward and
        backward per micro-batch, gradients accumulated, then clip and step. Appends the update's
        statistics, computed over the whole minibatch, to ``stats``. The seam (``self.parallel``)
        names this process's micro-batches, scales their losses and gathers the minibatch's log-probs."""
        cfg, seam = self.cfg, self.parallel
        micros = seam.rows_of(len(mb), cfg.micro_batch_size)
        mask = mb.completion_mask
        # a part of the minibatch per backward pass: each part's loss is its share of the minibatch's
        # mean (the minibatch's counts), so the gradients add up to the minibatch's
        shared = seam.split or len(micros) > 1
        counts = {"global_num_tokens": mask.sum(), "global_num_seqs": mask.any(-1).sum()} if shared else {}
        self._begin_update()
        parts, finite = MinibatchParts(), True
        for micro in micros:
            rows = mb.rows(micro.lo, micro.hi)
            logp, entropy = self.logprobs(rows, with_entropy=True)
            t0 = time.perf_counter()
            prox_logp = plan.minibatch(start + micro.lo, start + micro.hi, rows.behav_logp, logp,
                                       rows.versions)  # None: a coupled loss
            parts.prox_time += time.perf_counter() - t0
            ref_logp = self._reference_logprobs(rows)  # None without a KL penalty
            loss, loss_stats, kl = self._objective(rows, logp, prox_logp, ref_logp, counts)
            # a non-finite loss skips the update (shared: every process still runs the backward pass, a collective)
            finite = self._backward(seam.scale(loss, micro), always=seam.split) and finite
            parts.add(logp, entropy, prox_logp, ref_logp, loss, loss_stats, kl)
        parts = seam.gather(parts, micros, len(mb))  # the whole minibatch's log-probs [b, T]
        finite = seam.all_finite(finite)
        if shared:  # the statistics of the whole minibatch, from its detached log-probs
            with torch.no_grad():
                parts.loss, parts.loss_stats, parts.kl = self._objective(mb, parts.logp, parts.prox_logp,
                                                                         parts.ref_logp, {})
        _, ess_frac = minibatch_ess(parts.logp, mb.behav_logp, mask, cfg.vcpo.weight_cap)
        scale = lr_scale(ess_frac, cfg.vcpo.base_ess_ratio, cfg.vcpo.rule) if cfg.vcpo.enabled else 1.0
        with scaled_lr(self.optimizer, scale):  # VCPO: smaller steps on batches with a low ESS
            grad_norm = self._finish_update(finite)
        if parts.kl is not None:
            stats["kl_ref"].append(parts.kl.item())
        stats["ess_frac"].append(ess_frac)
        stats["lr_scale"].append(scale)
        stats["loss"].append(parts.loss.item())
        stats["grad_norm"].append(grad_norm)
        stats["entropy"].append(parts.entropy[mask].mean().item() if mask.any() else math.nan)
        for key, value in parts.loss_stats.items():
            stats[key].append(float(value))
        return parts

    def _reference_logprobs(self, rows: Batch) -> torch.Tensor | None:
        """[b, T] log-probs of ``rows`` under the frozen reference (no grad); None without one."""
        if self.reference is None:
            return None
        return self.reference.logprobs(rows, temperature=self.temperature, autocast=self._autocast(),
                                       logits_chunk=self.cfg.logits_chunk, lm_head_fp32=self.lm_head_fp32)

    def _objective(self, rows: Batch, logp: torch.Tensor, prox_logp: torch.Tensor | None,
                   ref_logp: torch.Tensor | None, counts: dict) -> tuple[torch.Tensor, dict, torch.Tensor | None]:
        """(loss, the loss's stats, KL penalty or None) of ``rows`` with log-probs ``logp`` [b, T];
        ``counts``: the minibatch's global_num_tokens / global_num_seqs when ``rows`` is a part of it."""
        loss, loss_stats = policy_loss(
            self.loss.name, logp, rows.behav_logp, rows.advantages, rows.completion_mask,
            prox_logp=prox_logp, versions=rows.versions, current_version=self.version,
            group_ids=rows.group_ids, **self.loss.params, **counts)
        kl = None
        if ref_logp is not None:
            kl = kl_penalty(logp, ref_logp, rows.completion_mask, self.cfg.kl_estimator,
                            num_tokens=counts.get("global_num_tokens"))
            loss = loss + self.cfg.kl_coef * kl
        return loss, loss_stats, kl

    def _advantages(self, batch: Batch) -> torch.Tensor:
        """[B] advantages: the group baseline, or VCPO's off-policy optimal baseline (``vcpo.opob``)."""
        cfg = self.cfg
        if not cfg.vcpo.opob:
            return episode_advantages(batch.rewards, batch.group_ids, batch.episode_ids, method=cfg.advantage,
                                      eps=cfg.adv_eps)
        if batch.episode_ids is not None:
            raise ValueError("vcpo.opob: its baseline weighs each row's own gradient, and an episode here spans "
                             "several rows (a history that forked); use vcpo.opob=false with episodes that fork")
        log_w = torch.zeros(len(batch), device=self.device)
        mask = batch.completion_mask

        def seq_logp(i: int) -> torch.Tensor:  # log π_θ(τ_i), and its log-weight on the side
            logp, _ = self.logprobs(batch.rows(i, i + 1))
            log_w[i] = sequence_log_weights(logp, batch.behav_logp[i:i + 1], mask[i:i + 1])[0]
            return logp[mask[i:i + 1]].sum()

        params = [p for p in self.model.parameters() if p.requires_grad]
        norms = score_grad_sq_norms(seq_logp, params, len(batch))
        return opob_advantages(batch.rewards, log_w, norms, batch.group_ids, method=cfg.advantage, eps=cfg.adv_eps)

    def _begin_update(self) -> None:
        # checked again at every update, not only at load: a scheduler or a caller may change them,
        # and a NaN clip limit rescales finite gradients to NaN after the finiteness check below
        check_hparams(self.cfg.grad_clip, [(g["lr"], g["betas"], g["weight_decay"])
                                           for g in self.optimizer.param_groups])
        self.optimizer.zero_grad(set_to_none=True)

    def _backward(self, loss: torch.Tensor, always: bool = False) -> bool:
        """Accumulates the gradient of a finite ``loss`` (scaled under float16); False, and no
        backward pass unless ``always`` (sharded: the pass is a collective), when it is not finite."""
        finite = bool(torch.isfinite(loss))
        if finite or always:
            (loss if self.scaler is None else self.scaler.scale(loss)).backward()
        return finite

    def _finish_update(self, finite: bool) -> float:
        """Clip + step on the accumulated gradients; returns the pre-clip grad norm, or NaN if the
        update was skipped (a non-finite loss or gradient, or a float16 overflow of the loss scale)."""
        if not finite:
            self.optimizer.zero_grad(set_to_none=True)
            return math.nan
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        grad_norm = self.parallel.whole(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip))
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            if self.scaler is not None:
                self.scaler.update()  # the overflow lowers the scale for the next update
            return math.nan
        if self.scaler is None:
            self.optimizer.step()
        else:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        return grad_norm.item()

    def close(self) -> None:
        """Nothing to release in one process (several ranks: asyncrl.runtime.ranks.LeaderTrainer)."""

    def master_weights(self) -> dict[str, torch.Tensor] | None:
        """None: a checkpoint writes the model's own weights (several ranks: the shards, gathered by
        asyncrl.runtime.ranks.LeaderTrainer)."""
        return None

    def state_dict(self) -> dict:
        state = {"optimizer": self.parallel.optimizer_state(self.optimizer), "version": self.version,
                 "rng": self.rng.get_state(), "scheduler": self.scheduler.state_dict(),
                 "schedule": schedule_key(self.cfg)}
        if self.scaler is not None:
            state["grad_scaler"] = self.scaler.state_dict()
        return state

    def write_shards(self, checkpoint: Path) -> None:
        """Into a checkpoint folder being written, the state :meth:`state_dict` leaves out: with
        several ranks, each rank's shard of the optimizer state (every rank calls it)."""
        self.parallel.write_shards(self.optimizer, checkpoint)

    def shard_bytes(self) -> int:
        """Bytes :meth:`write_shards` adds to a checkpoint (its free-space check)."""
        return self.parallel.shard_bytes(self.optimizer)

    def load_optimizer_state(self, state: dict) -> None:
        """Optimizer state from a checkpoint (the ESS rollback) under the current step's scheduled lr:
        the saved param groups carry the lr of the step they were saved at."""
        self.parallel.load_optimizer_state(self.optimizer, state)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr

    def load_state_dict(self, state: dict) -> None:
        self.parallel.load_optimizer_state(self.optimizer, state["optimizer"])
        self.version = int(state["version"])
        self.rng.set_state(state["rng"])
        if "scheduler" in state:  # checkpoints written before lr schedules existed: constant lr
            check_schedule(self.cfg, state)
            self.scheduler.load_state_dict(state["scheduler"])
        if self.scaler is not None and "grad_scaler" in state:
            self.scaler.load_state_dict(state["grad_scaler"])
