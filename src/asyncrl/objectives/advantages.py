"""Advantage estimators as pure functions (docs/objectives.md). Everything here is detached.

- group_advantages: GRPO, Dr.GRPO and RLOO baselines over prompt groups (outcome rewards);
  episode_advantages: the same where an episode spans several rows.
- gae: generalized advantage estimation with verl's mask handling.
- vtrace: IMPALA's V-trace targets and policy-gradient advantages (VACO's realignment, §11b).
- masked_whiten: (x − mean) / std over a mask.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from asyncrl.objectives.numerics import LOG_RATIO_BOUND
from asyncrl.objectives.params import check_choice, check_real

GROUP_METHODS = ("grpo", "drgrpo", "rloo")


def episode_advantages(rewards: Tensor, group_ids: Tensor, episode_ids: Tensor | None, method: str = "grpo",
                       eps: float = 1e-6) -> Tensor:
    """:func:`group_advantages` where an episode may span several rows (a history that forked):
    episode_ids [B] integer, the episode of each row within its group (rows of one episode share
    its reward). Each episode counts once in its group's baseline, and each of its rows gets the
    episode's advantage, so an episode that forked weighs no more in the baseline than one that did
    not. None: every row is its own episode (exactly :func:`group_advantages`)."""
    if episode_ids is None:
        return group_advantages(rewards, group_ids, method, eps)
    if episode_ids.shape != group_ids.shape:
        raise ValueError(f"episode_ids: expected shape {tuple(group_ids.shape)}, got {tuple(episode_ids.shape)}")
    keys, row_of = torch.unique(torch.stack([group_ids, episode_ids.to(group_ids.device)]), dim=1,
                                return_inverse=True)
    first = torch.full((keys.shape[1],), rewards.numel(), dtype=torch.long, device=rewards.device)
    first = first.scatter_reduce(0, row_of, torch.arange(rewards.numel(), device=rewards.device), reduce="amin")
    per_episode = group_advantages(rewards[first], group_ids[first], method, eps)
    return per_episode[row_of]


def group_advantages(rewards: Tensor, group_ids: Tensor, method: str = "grpo", eps: float = 1e-6) -> Tensor:
    """Per-sequence advantages from outcome rewards, normalized within prompt groups.

    rewards: [B] float, one finite reward per sequence. group_ids: [B] integer prompt ids (samples of
    one prompt share an id; any order). Returns [B] float32.
      "grpo":   (R_i − mean_g) / (std_g + eps), std_g Bessel-corrected (n − 1; as verl's torch.std and
                AReaL's default), eps = 1e-6 (verl).
      "drgrpo": R_i − mean_g (Dr.GRPO, no std division).
      "rloo":   R_i − mean_{j∈g, j≠i} R_j = n/(n − 1) · (R_i − mean_g).
    A group whose rewards are all equal gets 0 (eps prevents 0/0). A singleton group gets 0 for every
    method (verl would return R itself, i.e. no baseline): one sample carries no relative signal.
    Computed in float64 so large reward offsets do not cancel catastrophically.
    """
    check_choice("method", method, GROUP_METHODS)
    check_real("eps", eps, low=0.0)
    if rewards.dim() != 1 or group_ids.shape != rewards.shape:
        raise ValueError(f"rewards, group_ids: expected equal [B] shapes, got {tuple(rewards.shape)}, "
                         f"{tuple(group_ids.shape)}")
    if group_ids.is_floating_point():
        raise ValueError(f"group_ids: expected an integer tensor, got {group_ids.dtype}")
    r = rewards.detach().double()
    uniq, inverse = torch.unique(group_ids, return_inverse=True)

    def group_sum(x: Tensor) -> Tensor:
        return torch.zeros(uniq.numel(), dtype=torch.float64, device=r.device).index_add_(0, inverse, x)

    count = group_sum(torch.ones_like(r))
    dev = r - (group_sum(r) / count)[inverse]
    n = count[inverse]
    if method == "grpo":
        std = (group_sum(dev * dev) / (count - 1).clamp(min=1)).sqrt()[inverse]
        adv = dev / (std + eps)
    elif method == "drgrpo":
        adv = dev
    else:
        adv = dev * n / (n - 1).clamp(min=1)
    return torch.where(n > 1, adv, 0.0).float()


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(x − mean) / sqrt(var + eps) over mask (unbiased var, as verl); 0 outside the mask.

    x: [...] float, mask: same shape bool. shift_mean=False keeps the mean (rescale only).
    """
    mask = mask.bool()
    n = mask.sum()
    xs = torch.where(mask, x.float(), 0.0)
    mean = xs.sum() / n.clamp(min=1)
    var = torch.where(mask, (xs - mean) ** 2, 0.0).sum() / (n - 1).clamp(min=1)
    out = (xs - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(mask, out, 0.0)


def _check_bt(names: str, *tensors: Tensor) -> None:
    shape = tensors[0].shape
    if len(shape) != 2 or any(t.shape != shape for t in tensors):
        raise ValueError(f"{names}: expected equal [B, T] shapes, got {[tuple(t.shape) for t in tensors]}")


def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    gamma: float | Tensor = 1.0,
    lam: float = 1.0,
    bootstrap_value: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation, one episode per row (Schulman et al. 2016).

    rewards, values: [B, T] float; mask: [B, T] bool (valid steps). bootstrap_value: [B] float value
    after the last valid step (default 0: the episode ended, as for LLM completions).
    δ_t = r_t + γ V_{t+1} − V_t,  Â_t = δ_t + γλ Â_{t+1}, where "t+1" is the next *valid* step: masked
    positions are skipped and carry the next value and the running Â through (verl), so interior masks
    (e.g. tool output in multi-turn) are transparent. Defaults γ = λ = 1 (LLM); classic control uses
    0.99 / 0.95. gamma may also be a [B, T] float tensor of per-step discounts (γ_t = 0 where an
    episode ends after step t, for rows that hold several episodes, as in vectorised classic control).
    Returns (advantages, returns = advantages + values), float32 [B, T], 0 where masked;
    not whitened (see masked_whiten).
    """
    _check_bt("rewards, values, mask", rewards, values, mask)
    if isinstance(gamma, Tensor):
        _check_bt("rewards, gamma", rewards, gamma)
    else:
        check_real("gamma", gamma, low=0.0, high=1.0)
    check_real("lam", lam, low=0.0, high=1.0)
    m = mask.bool()
    r = torch.where(m, rewards.detach().float(), 0.0)
    v = torch.where(m, values.detach().float(), 0.0)
    b, t_len = r.shape
    next_v = torch.zeros(b) if bootstrap_value is None else bootstrap_value.detach().float()
    next_v = next_v.to(r.device)
    running = torch.zeros(b, device=r.device)
    adv = torch.zeros_like(r)
    g = torch.as_tensor(gamma, dtype=torch.float32, device=r.device).expand_as(r)
    for t in reversed(range(t_len)):
        delta = r[:, t] + g[:, t] * next_v - v[:, t]
        new = delta + g[:, t] * lam * running
        m_t = m[:, t]
        adv[:, t] = torch.where(m_t, new, 0.0)
        running = torch.where(m_t, new, running)
        next_v = torch.where(m_t, v[:, t], next_v)
    return adv, torch.where(m, adv + v, 0.0)


class VTrace(NamedTuple):
    """vs: [B, T] float32 V-trace value targets; pg_advantages: [B, T] float32 ρ^pg (r + γ v_{t+1} − V).
    Both 0 where masked."""

    vs: Tensor
    pg_advantages: Tensor


def vtrace(
    behav_logp: Tensor,
    target_logp: Tensor,
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    bootstrap_value: Tensor | None = None,
    gamma: float | Tensor = 1.0,
    lam: float = 1.0,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    rho_pg_bar: float = 1.0,
) -> VTrace:
    """V-trace (Espeholt et al. 2018, IMPALA), one trajectory per row, computed once and detached.

    behav_logp (μ), target_logp (π), rewards, values: [B, T] float; mask: [B, T] bool.
    bootstrap_value: [B] float V(x_{s+n}) after the last valid step (default 0). gamma: float or
    [B, T] float discounts (γ_t = 0 at episode ends). With ratios clamped in log space to ±20:
      ρ_t = min(ρ̄, π/μ),  c_t = λ min(c̄, π/μ),  δ_t = ρ_t (r_t + γ_t V_{t+1} − V_t),
      v_t − V_t = δ_t + γ_t c_t (v_{t+1} − V_{t+1}),   A^pg_t = min(ρ̄_pg, π/μ) (r_t + γ_t v_{t+1} − V_t).
    Masked positions are skipped like in ``gae``. Requires ρ̄ >= c̄ (IMPALA). Defaults ρ̄ = c̄ = ρ̄_pg = λ = 1.
    """
    _check_bt("behav_logp, target_logp, rewards, values, mask", behav_logp, target_logp, rewards, values, mask)
    check_real("lam", lam, low=0.0, high=1.0)
    check_real("rho_bar", rho_bar, low=0.0, low_open=True)
    check_real("c_bar", c_bar, low=0.0, low_open=True, high=rho_bar)
    check_real("rho_pg_bar", rho_pg_bar, low=0.0, low_open=True)
    m = mask.bool()
    lp_b, lp_t = behav_logp.detach().float(), target_logp.detach().float()
    m = m & torch.isfinite(lp_b) & torch.isfinite(lp_t)
    log_rho = torch.where(m, lp_t - lp_b, 0.0).clamp(-LOG_RATIO_BOUND, LOG_RATIO_BOUND)
    rho = torch.exp(log_rho)
    rho_c, c, rho_pg = rho.clamp(max=rho_bar), lam * rho.clamp(max=c_bar), rho.clamp(max=rho_pg_bar)
    g = torch.as_tensor(gamma, dtype=torch.float32, device=rho.device).expand_as(rho)
    r = torch.where(m, rewards.detach().float(), 0.0)
    v = torch.where(m, values.detach().float(), 0.0)
    b, t_len = r.shape
    boot = torch.zeros(b, device=r.device) if bootstrap_value is None else bootstrap_value.detach().float()
    next_v, next_vs, acc = boot, boot, torch.zeros(b, device=r.device)
    vs, pg = torch.zeros_like(r), torch.zeros_like(r)
    for t in reversed(range(t_len)):
        m_t = m[:, t]
        delta = rho_c[:, t] * (r[:, t] + g[:, t] * next_v - v[:, t])
        new_acc = delta + g[:, t] * c[:, t] * acc
        vs_t = v[:, t] + new_acc
        vs[:, t] = torch.where(m_t, vs_t, 0.0)
        pg[:, t] = torch.where(m_t, rho_pg[:, t] * (r[:, t] + g[:, t] * next_vs - v[:, t]), 0.0)
        acc = torch.where(m_t, new_acc, acc)
        next_v = torch.where(m_t, v[:, t], next_v)
        next_vs = torch.where(m_t, vs_t, next_vs)
    return VTrace(vs=vs, pg_advantages=pg)
