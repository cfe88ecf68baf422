"""``ControlConfig``: every knob of one classic-control run, validated on construction.

Defaults follow CleanRL: ``ppo.py`` for discrete-action envs (CartPole) and
``ppo_continuous_action.py`` for MuJoCo, except that MuJoCo runs 8 actors × 256 steps (CleanRL: 1 × 2048,
the same 2048 transitions per update) so that the policy buffer has several actors to hand policies to.
Bad values raise ValueError whose message starts with the field name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from benchmarks.control.arms import ARMS
from asyncrl.objectives import validate_loss_params
from asyncrl.objectives.params import check_bool, check_choice, check_real

BUFFER_MODES = ("random", "lag", "live")
DISCRETE_ENVS = ("CartPole-v1", "Acrobot-v1")
MUJOCO_ENVS = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5")
KNOWN_ENVS = DISCRETE_ENVS + MUJOCO_ENVS


@dataclass(frozen=True)
class ControlConfig:
    """One run. ``arm`` names an entry of ``benchmarks.control.arms.ARMS``.

    buffer_capacity N: how many past policy snapshots the simulated-async policy buffer keeps (N = 1
    is synchronous). buffer_mode: "random" (each actor draws a snapshot uniformly per rollout, the
    paper's setup), "lag" (every actor uses the oldest snapshot: a fixed lag of N − 1 updates once the
    buffer is full) or "live" (actors act with the learner itself: plain on-policy PPO, no snapshots).
    """

    env_id: str = "CartPole-v1"
    arm: str = "ppo"
    seed: int = 0
    total_steps: int = 500_000
    num_envs: int = 4
    num_steps: int = 128
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    num_minibatches: int = 4
    update_epochs: int = 4
    norm_adv: bool = True
    clip_coef: float = 0.2
    clip_vloss: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    normalize: bool = False
    hidden: int = 64
    buffer_capacity: int = 1
    buffer_mode: str = "random"
    kl_coef: float = 1.0
    tv_delta: float = 0.2
    vtrace_lambda: float = 1.0
    torch_threads: int = 1

    def __post_init__(self) -> None:
        check_choice("env_id", self.env_id, KNOWN_ENVS)
        check_choice("arm", self.arm, tuple(ARMS))
        check_choice("buffer_mode", self.buffer_mode, BUFFER_MODES)
        _check_int("seed", self.seed, low=0)
        for name in ("total_steps", "num_envs", "num_steps", "num_minibatches", "update_epochs", "hidden",
                     "buffer_capacity", "torch_threads"):
            _check_int(name, getattr(self, name), low=1)
        for name in ("lr", "clip_coef", "max_grad_norm"):
            check_real(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("ent_coef", "vf_coef", "kl_coef", "tv_delta"):
            check_real(name, getattr(self, name), low=0.0)
        for name in ("gamma", "gae_lambda", "vtrace_lambda"):
            check_real(name, getattr(self, name), low=0.0, high=1.0)
        for name in ("anneal_lr", "norm_adv", "clip_vloss", "normalize"):
            check_bool(name, getattr(self, name))
        if self.batch_size % self.num_minibatches:
            raise ValueError(f"num_minibatches={self.num_minibatches}: must divide num_envs × num_steps "
                             f"= {self.batch_size}")
        if self.total_steps < self.batch_size:
            raise ValueError(f"total_steps={self.total_steps}: must be >= num_envs × num_steps = {self.batch_size}")
        validate_loss_params(ARMS[self.arm].loss, ARMS[self.arm].params(self))  # e.g. clip_coef < 1 for ppo

    @property
    def batch_size(self) -> int:
        """Transitions per update: num_envs × num_steps."""
        return self.num_envs * self.num_steps

    @property
    def iterations(self) -> int:
        """Number of collect-then-update rounds (total_steps rounded down to whole batches)."""
        return self.total_steps // self.batch_size


def _check_int(name: str, value: Any, *, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name}={value!r}: must be an integer >= {low}")


# CleanRL's ppo_continuous_action defaults (with 8 × 256 actors × steps instead of 1 × 2048).
CONTINUOUS_PRESET: dict[str, Any] = {
    "total_steps": 1_000_000, "num_envs": 8, "num_steps": 256, "lr": 3e-4, "num_minibatches": 32,
    "update_epochs": 10, "ent_coef": 0.0, "normalize": True,
}
PRESETS: dict[str, dict[str, Any]] = {env: {} for env in DISCRETE_ENVS} | {env: CONTINUOUS_PRESET
                                                                           for env in MUJOCO_ENVS}


def make_config(env_id: str = "CartPole-v1", **overrides: Any) -> ControlConfig:
    """The env's preset with ``overrides`` on top (unknown keys raise ValueError naming them)."""
    if env_id not in PRESETS:
        raise ValueError(f"env_id={env_id!r}: must be one of {', '.join(repr(e) for e in KNOWN_ENVS)}")
    known = {f.name for f in dataclasses.fields(ControlConfig)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(f"{unknown[0]}: unknown control config key (known: {', '.join(sorted(known))})")
    return ControlConfig(env_id=env_id, **{**PRESETS[env_id], **overrides})


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["key=value", ...]`` → {key: typed value}, typed by the ControlConfig field's default."""
    types = {f.name: type(f.default) for f in dataclasses.fields(ControlConfig)}
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or key not in types:
            raise ValueError(f"{key or item}: unknown control config key (expected key=value; known: "
                             f"{', '.join(sorted(types))})")
        out[key] = _parse_value(key, text, types[key])
    return out


def _parse_value(key: str, text: str, kind: type) -> Any:
    try:
        if kind is bool:
            return {"true": True, "false": False}[text.lower()]
        if kind is int:  # also "3e5": a float literal with an integral value
            number = float(text)
            if not number.is_integer():
                raise ValueError
            return int(number)
        return kind(text)
    except (ValueError, KeyError):
        raise ValueError(f"{key}={text!r}: must be {_KIND_WORDS.get(kind, kind.__name__)}") \
            from None


_KIND_WORDS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
