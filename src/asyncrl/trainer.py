"""One training step: advantages, proximal log-probs, ``n_minibatches`` AdamW updates, version += 1.

The objective and the proximal policy are reached only through the ``asyncrl.objectives``
registries: this file never branches on the loss's or the proximal strategy's name (a strategy
declares whether it needs the extra forward pass, and the trainer runs it). Non-finite losses or
gradients skip the update (counted), so NaN/inf never reaches the weights.

Device: the trainer works on its model's device; a batch moves there once, at the entrance of
:meth:`Trainer.step`. Mixed precision (``trainer.autocast``): the weights and the optimizer stay
in the policy dtype (fp32 master weights); forward passes run under ``torch.autocast``.

Learning rate: ``trainer.lr_schedule`` (asyncrl.lr_schedule) sets each step's lr; VCPO's ESS rule
scales that lr for one minibatch update and restores it. Optional KL penalty to a frozen reference
(``trainer.kl_coef``, asyncrl.reference): one extra no-grad forward per minibatch.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections import defaultdict

import torch

from asyncrl.config import LossConfig, TrainerConfig
from asyncrl.lr_schedule import build_scheduler, check_schedule, schedule_key
from asyncrl.objectives import ProxPlan, group_advantages, policy_loss, prox_strategy
from asyncrl.policy.logprobs import completion_logprobs
from asyncrl.reference import ReferencePolicy, kl_penalty
from asyncrl.stability.ess_lr import lr_scale, minibatch_ess, scaled_lr, sequence_log_weights
from asyncrl.stability.opob import opob_advantages, score_grad_sq_norms
from asyncrl.types import Batch

AUTOCAST_DTYPES = {"none": None, "bfloat16": torch.bfloat16, "float16": torch.float16}


class Trainer:
    """Owns the trained model, its optimizer and the policy version counter."""

    def __init__(self, model: torch.nn.Module, cfg: TrainerConfig, loss: LossConfig, *,
                 temperature: float = 1.0, seed: int = 0, reference: ReferencePolicy | None = None):
        self.model = model
        self.reference = reference if cfg.kl_coef > 0 else None  # frozen starting policy of the KL penalty
        self.cfg = cfg
        self.loss = loss
        self.temperature = temperature
        self.version = 0
        self.device = next(model.parameters()).device
        _check_hparams(cfg.grad_clip, [(cfg.lr, (cfg.beta1, cfg.beta2), cfg.weight_decay)])
        # fused AdamW: one kernel for all parameters on CUDA (the foreach path elsewhere)
        fused = {"fused": True} if self.device.type == "cuda" else {}
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), weight_decay=cfg.weight_decay, **fused)
        self.scheduler = build_scheduler(self.optimizer, cfg)
        self.rng = torch.Generator().manual_seed(seed)  # minibatch permutation, sampled on the CPU
        self.autocast_dtype = AUTOCAST_DTYPES[cfg.autocast]
        self.prox = prox_strategy(cfg.prox)  # how each step obtains log π_prox (asyncrl.objectives.prox)

    def _autocast(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device.type, dtype=self.autocast_dtype)

    def logprobs(self, batch: Batch, with_entropy: bool = False):
        with self._autocast():
            return completion_logprobs(self.model, batch.prompt_ids, batch.prompt_mask, batch.completion_ids,
                                       batch.completion_mask, temperature=self.temperature,
                                       with_entropy=with_entropy)

    def _prox_setup(self, batch: Batch, sizes: list[int]) -> tuple[ProxPlan, tuple | None, bool, float, float]:
        """The step's proximal plan, after the extra no-grad forward pass when the strategy needs the
        exact log-probs or trainer.prox_error measures the approximation on this step.
        Returns (plan, exact parts per minibatch when measured, measured?, prox s, measurement s)."""
        cfg = self.cfg
        measure = cfg.prox_error and self.prox.approximate and self.version % cfg.prox_error_every == 0
        exact_logp, error_time = None, 0.0
        t0 = time.perf_counter()
        if self.prox.needs_forward or measure:
            with torch.no_grad():
                exact_logp = self.logprobs(batch)[0]
            if measure:  # the measurement is not the approximation's cost
                error_time, t0 = time.perf_counter() - t0, time.perf_counter()
        plan = self.prox.plan(batch.behav_logp, batch.versions, self.version, exact_logp)
        exact_parts = exact_logp.split(sizes) if measure else None
        return plan, exact_parts, measure, time.perf_counter() - t0, error_time

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
        plan, exact_parts, measure, prox_time, error_time = self._prox_setup(batch, sizes)
        stats: dict[str, list[float]] = defaultdict(list)
        for i, (start, size) in enumerate(zip(starts, sizes)):
            mb = batch.rows(start, start + size)
            logp, entropy = self.logprobs(mb, with_entropy=True)
            t0 = time.perf_counter()
            prox_logp = plan.minibatch(start, start + size, mb.behav_logp, logp, mb.versions)  # None: coupled
            prox_time += time.perf_counter() - t0
            if measure:
                for key, value in prox_error_stats(exact_parts[i], prox_logp, mb.completion_mask,
                                                   self.version - mb.versions).items():
                    stats[key].append(value)
            loss, loss_stats = policy_loss(
                self.loss.name, logp, mb.behav_logp, mb.advantages, mb.completion_mask,
                prox_logp=prox_logp, versions=mb.versions, current_version=self.version,
                group_ids=mb.group_ids, **self.loss.params)
            if self.reference is not None:
                ref_logp = self.reference.logprobs(mb, temperature=self.temperature, autocast=self._autocast())
                kl = kl_penalty(logp, ref_logp, mb.completion_mask, cfg.kl_estimator)
                loss = loss + cfg.kl_coef * kl
                stats["kl_ref"].append(kl.item())
            _, ess_frac = minibatch_ess(logp, mb.behav_logp, mb.completion_mask, cfg.vcpo.weight_cap)
            scale = lr_scale(ess_frac, cfg.vcpo.base_ess_ratio, cfg.vcpo.rule) if cfg.vcpo.enabled else 1.0
            with scaled_lr(self.optimizer, scale):  # VCPO: smaller steps on batches with a low ESS
                grad_norm = self._update(loss)
            stats["ess_frac"].append(ess_frac)
            stats["lr_scale"].append(scale)
            stats["loss"].append(loss.item())
            stats["grad_norm"].append(grad_norm)
            mask = mb.completion_mask
            stats["entropy"].append((entropy.detach()[mask].mean().item()) if mask.any() else math.nan)
            for key, value in loss_stats.items():
                stats[key].append(float(value))
        self.version += 1
        with warnings.catch_warnings():  # a step whose updates were all skipped still moves the schedule on
            warnings.filterwarnings("ignore", r"Detected call of `lr_scheduler\.step\(\)` before")
            self.scheduler.step()  # the next step's lr
        out = {key: _nanmean(values) for key, values in stats.items()}
        if "prox_abs_err_max" in stats:  # the step's worst token, not a mean of per-minibatch maxima
            out["prox_abs_err_max"] = max(stats["prox_abs_err_max"], key=lambda v: -math.inf if math.isnan(v) else v)
        out["skipped_updates"] = float(sum(not math.isfinite(g) for g in stats["grad_norm"]))
        out["ess_frac_first"] = stats["ess_frac"][0]  # before this step's first update: staleness alone
        out["ess_frac_min"] = min(stats["ess_frac"])
        out["lr"] = step_lr
        out["lr_effective"] = step_lr * out["lr_scale"]
        out.update(_advantage_stats(batch))
        out["prox_time_s"] = prox_time
        if measure:
            out["prox_error_time_s"] = error_time
        out["train_time_s"] = time.perf_counter() - started
        return out

    def _advantages(self, batch: Batch) -> torch.Tensor:
        """[B] advantages: the group baseline, or VCPO's off-policy optimal baseline (``vcpo.opob``)."""
        cfg = self.cfg
        if not cfg.vcpo.opob:
            return group_advantages(batch.rewards, batch.group_ids, method=cfg.advantage, eps=cfg.adv_eps)
        log_w = torch.zeros(len(batch), device=self.device)
        mask = batch.completion_mask

        def seq_logp(i: int) -> torch.Tensor:  # log π_θ(τ_i), and its log-weight on the side
            logp, _ = self.logprobs(batch.rows(i, i + 1))
            log_w[i] = sequence_log_weights(logp, batch.behav_logp[i:i + 1], mask[i:i + 1])[0]
            return logp[mask[i:i + 1]].sum()

        params = [p for p in self.model.parameters() if p.requires_grad]
        norms = score_grad_sq_norms(seq_logp, params, len(batch))
        return opob_advantages(batch.rewards, log_w, norms, batch.group_ids, method=cfg.advantage, eps=cfg.adv_eps)

    def _update(self, loss: torch.Tensor) -> float:
        """Backward + clip + step; returns the pre-clip grad norm, or NaN if the update was skipped."""
        # checked again at every update, not only at load: a scheduler or a caller may change them,
        # and a NaN clip limit rescales finite gradients to NaN after the finiteness check below
        _check_hparams(self.cfg.grad_clip, [(g["lr"], g["betas"], g["weight_decay"])
                                            for g in self.optimizer.param_groups])
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return math.nan
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if not torch.isfinite(grad_norm):
            self.optimizer.zero_grad(set_to_none=True)
            return math.nan
        self.optimizer.step()
        return grad_norm.item()

    def state_dict(self) -> dict:
        return {"optimizer": self.optimizer.state_dict(), "version": self.version,
                "rng": self.rng.get_state(), "scheduler": self.scheduler.state_dict(),
                "schedule": schedule_key(self.cfg)}

    def load_optimizer_state(self, state: dict) -> None:
        """Optimizer state from a checkpoint (the ESS rollback) under the current step's scheduled lr:
        the saved param groups carry the lr of the step they were saved at."""
        self.optimizer.load_state_dict(state)
        for group, lr in zip(self.optimizer.param_groups, self.scheduler.get_last_lr()):
            group["lr"] = lr

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        self.version = int(state["version"])
        self.rng.set_state(state["rng"])
        if "scheduler" in state:  # checkpoints written before lr schedules existed: constant lr
            check_schedule(self.cfg, state)
            self.scheduler.load_state_dict(state["scheduler"])


def _check_hparams(clip: float, groups: list[tuple]) -> None:
    """ValueError unless the clip limit and every (lr, betas, weight_decay) is finite and in range:
    the settings through which NaN could reach the weights from finite gradients."""
    if not (math.isfinite(clip) and clip > 0):
        raise ValueError(f"trainer.grad_clip: must be a finite number > 0, got {clip}")
    for lr, (b1, b2), wd in groups:
        lr, b1, b2, wd = float(lr), float(b1), float(b2), float(wd)
        if not (math.isfinite(lr) and lr > 0):
            raise ValueError(f"trainer.lr: must be a finite number > 0, got {lr}")
        if not (0 <= b1 < 1 and 0 <= b2 < 1):
            raise ValueError(f"trainer.beta1/beta2: must be in [0, 1), got {b1}, {b2}")
        if not (math.isfinite(wd) and wd >= 0):
            raise ValueError(f"trainer.weight_decay: must be a finite number >= 0, got {wd}")


def _nanmean(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return sum(finite) / len(finite) if finite else math.nan


def _advantage_stats(batch: Batch) -> dict[str, float]:
    adv = batch.advantages.float()
    groups = batch.group_ids.unique()
    zero = sum(bool((adv[batch.group_ids == g] == 0).all()) for g in groups)
    return {"adv_mean": adv.mean().item(), "adv_std": adv.std(unbiased=False).item(),
            "frac_zero_adv_groups": zero / max(1, len(groups))}


def prox_error_stats(exact_logp: torch.Tensor, approx_logp: torch.Tensor, mask: torch.Tensor,
                     staleness: torch.Tensor | None = None) -> dict[str, float]:
    """Mean and max over valid tokens of |exact − approximate| proximal log-prob; all [B, T].
    With ``staleness`` ([B, T] versions behind), also the mean per staleness value present:
    ``prox_abs_err_stale<s>``, the curve of how the error grows with staleness."""
    if not mask.any():
        return {"prox_abs_err_mean": math.nan, "prox_abs_err_max": math.nan}
    err = (exact_logp.detach() - approx_logp.detach()).abs()
    out = {"prox_abs_err_mean": err[mask].mean().item(), "prox_abs_err_max": err[mask].max().item()}
    if staleness is not None:
        stale = staleness[mask]
        for s in stale.unique().tolist():
            out[f"prox_abs_err_stale{s}"] = err[mask][stale == s].mean().item()
    return out
