"""Batch sources without concurrency: generate a batch, then the trainer trains on it.

``sync`` generates with the weights being trained (the paper's "sync GRPO" baseline).
``simulated`` generates with an older version — exactly version k − ``async.lag`` for step k, or
one drawn uniformly from the last ``async.policy_buffer`` versions (VACO's buffer of past
policies) — so staleness is exact and reproducible to the bit.

Both hold their engine in this process, so evaluation may generate through it
(:meth:`LockstepSource.eval_engine`) with the newest weights.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict

import torch

from asyncrl.config import Config
from asyncrl.policy.lora import export_state_dict
from asyncrl.policy.model import DTYPES, plain_copy
from asyncrl.rollout import ENGINES, PromptStream
from asyncrl.rollout.rollouts import make_rollout
from asyncrl.runtime.engines import generation_dtype, rollout_engine
from asyncrl.runtime.session import Session
from asyncrl.runtime.signals import StopRequested
from asyncrl.core.loader import ConfigError
from asyncrl.types import Batch


class CurrentPolicy:
    """Sync: every batch comes from the weights being trained."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.version = 0  # the newest published version (the trained weights are always the newest)

    def select(self, version: int):
        return self.model, version

    def newest(self):
        """The newest weights and their version."""
        return self.model, self.version

    def record(self, model: torch.nn.Module, version: int) -> None:
        self.version = version

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class LaggedPolicies:
    """The last ``depth`` weight snapshots; ``select`` picks the version that generates the next batch.

    A snapshot is held in ``dtype`` (the generation dtype: the engine would round to it anyway, so
    generation is the same as from full-precision snapshots) on the model's device, or with
    ``on_host`` in host memory (pinned when the model is on CUDA, for fast copies); the engine's
    ``update_weights`` copies the chosen one onto its device."""

    def __init__(self, model: torch.nn.Module, lag: int, policy_buffer: int, seed: int, *,
                 dtype: torch.dtype | None = None, on_host: bool = False):
        self.lag = lag
        self.policy_buffer = policy_buffer
        self.depth = max(lag, policy_buffer) + 1
        self.rng = random.Random(seed)
        model_device = next(model.parameters()).device
        self.device = torch.device("cpu") if on_host else model_device
        self.pinned = on_host and model_device.type == "cuda"
        self.dtype = dtype  # None = each tensor's own
        self.snapshots: OrderedDict[int, dict[str, torch.Tensor]] = OrderedDict()
        self.record(model, 0)

    def _placed(self, tensor: torch.Tensor) -> torch.Tensor:
        """A copy of ``tensor`` in the snapshot dtype (floating tensors only) and place."""
        dtype = self.dtype if self.dtype is not None and tensor.is_floating_point() else tensor.dtype
        copy = torch.empty(tensor.shape, dtype=dtype, device=self.device, pin_memory=self.pinned)
        return copy.copy_(tensor)

    @torch.no_grad()
    def record(self, model: torch.nn.Module, version: int) -> None:
        self.snapshots[version] = {k: self._placed(v.detach()) for k, v in export_state_dict(model).items()}
        while len(self.snapshots) > self.depth:
            self.snapshots.popitem(last=False)

    def newest(self):
        """The newest snapshot and its version."""
        version = next(reversed(self.snapshots))
        return self.snapshots[version], version

    def select(self, version: int):
        if self.policy_buffer:
            chosen = self.rng.randint(max(0, version - self.policy_buffer + 1), version)
        else:
            chosen = max(0, version - self.lag)
        return self.snapshots[chosen], chosen

    def state_dict(self) -> dict:
        """The held past weights (a resumed run must generate from exactly them) and the RNG."""
        return {"rng": self.rng.getstate(), "snapshots": [[v, w] for v, w in self.snapshots.items()]}

    def load_state_dict(self, state: dict) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
        self.snapshots = OrderedDict((int(v), {k: self._placed(t) for k, t in w.items()})
                                     for v, w in state["snapshots"])


class LockstepSource:
    """Prompts → engine (weights of the version ``policies`` selects) → scored batch."""

    n_generators = 1

    def __init__(self, cfg: Config, session: Session, policies, *, own_weights: bool):
        ro = cfg.rollout
        self.cfg, self.session, self.policies = cfg, session, policies
        model = session.model
        if own_weights and not ENGINES[ro.engine].owns_weights:  # past versions need weights of their own
            model = plain_copy(model, cfg.policy.device, DTYPES[generation_dtype(cfg)])
        self.engine = rollout_engine(cfg, model=model, tokenizer=session.tokenizer,
                                     policy_dir=session.policy_dir, seed=cfg.run.seed, chunked=False)
        self.prompts = PromptStream(session.train_problems, ro.prompts_per_step, seed=cfg.run.seed)
        self.rollout = make_rollout(cfg, session.rewards, session.tokenizer)  # single turns or episodes
        self.metrics: dict[str, float] = {}
        self.failed_groups: list[int] = []  # groups left out for a failed episode, for the ledger
        self.extra_group_id = -ro.prompts_per_step  # first id of a batch played again after all its groups failed
        self.episode_records: list[dict] = []  # of the last step: episodes.jsonl
        if session.resume is not None:
            self._restore(session.resume.source_state)

    def __enter__(self) -> "LockstepSource":
        return self

    def __exit__(self, *exc) -> None:
        close = getattr(self.rollout, "close", None)  # a harness's endpoint stops taking requests
        if close is not None:
            close()

    def wait_ready(self) -> None:
        pass

    def next_batch(self, version: int, step: int) -> Batch:
        """The step's batch. A stop signal while episodes wait on their environments, or an
        environment error that ends the run, abandons it and puts the prompt stream and sampler back
        where the step began: the checkpoint of the last finished step then resumes exactly (the
        batch is generated again)."""
        before = (self.prompts.state_dict(), self.engine.rng_state(), self.extra_group_id, list(self.failed_groups))
        try:
            return self._next_batch(version, step)
        except (StopRequested, ConfigError):  # a stop, or an environment past its failure policy
            prompts, rng, self.extra_group_id, self.failed_groups = before
            self.prompts.load_state_dict(prompts)
            self.engine.set_rng_state(rng)
            raise

    def _next_batch(self, version: int, step: int) -> Batch:
        ro = self.cfg.rollout
        problems = self.prompts.next()
        t0 = time.perf_counter()
        weights, chosen = self.policies.select(version)
        if chosen != self.engine.version:
            self.engine.update_weights(weights, chosen)
        pulled = time.perf_counter()
        out = self.rollout.run(self.engine, problems, ro.samples_per_prompt,
                               first_group_id=(step - 1) * ro.prompts_per_step, stop_check=self.session.stop.check)
        stats = out.stats
        self.failed_groups += out.failed_groups
        while len(out.batch) == 0:  # every group had a failed episode: play the next prompts (the
            # failure window stops a run whose environment fails for good)
            problems = self.prompts.next()
            out = self.rollout.run(self.engine, problems, ro.samples_per_prompt, first_group_id=self.extra_group_id,
                                   stop_check=self.session.stop.check)
            self.extra_group_id -= ro.prompts_per_step  # ids below 0: groups no step number accounts for
            self.failed_groups += out.failed_groups
            stats.merge(out.stats)
        self.metrics.update(gen_time_s=time.perf_counter() - pulled, weight_pull_s=pulled - t0,
                            gen_tokens=int(out.batch.completion_mask.sum()))
        if stats is not None:
            self.metrics.update(stats.metrics())
            self.episode_records = stats.records
        return out.batch

    def eval_engine(self):
        """The engine evaluation generates through, holding the newest weights (loaded now if it
        holds another version: sync loads them before the next batch anyway, simulated reloads its
        lagged version then); None for an engine that cannot generate with other sampling settings
        (the transformers engine: evaluation generates with the trained model itself)."""
        if not hasattr(self.engine, "with_sampling"):
            return None
        weights, version = self.policies.newest()
        if version != self.engine.version:
            self.engine.update_weights(weights, version)
        return self.engine

    def publish(self, model: torch.nn.Module, version: int) -> None:
        t0 = time.perf_counter()
        self.policies.record(model, version)
        self.metrics["weight_publish_s"] = time.perf_counter() - t0

    def step_metrics(self) -> dict[str, float]:
        out, self.metrics = self.metrics, {}
        return out

    def observe(self, stats: dict[str, float], wait_frac: float) -> None:
        pass  # no look-ahead to adapt

    def take_episode_records(self) -> list[dict]:
        """The rows of the episodes played for the last batch (asyncrl.agents.records)."""
        out, self.episode_records = self.episode_records, []
        return out

    def take_dropped_groups(self) -> list[int]:
        """Groups generated and not trained on: those with a failed episode (every other one is)."""
        out, self.failed_groups = self.failed_groups, []
        return out

    def state_dict(self) -> dict:
        return {"prompts": self.prompts.state_dict(), "engine_rng": self.engine.rng_state(),
                "policies": self.policies.state_dict(), "extra_group_id": self.extra_group_id}

    def _restore(self, state: dict) -> None:
        self.prompts.load_state_dict(state["prompts"])
        self.engine.set_rng_state(state["engine_rng"])
        self.policies.load_state_dict(state["policies"])
        self.extra_group_id = int(state.get("extra_group_id", self.extra_group_id))
        self.engine.version = -1  # holds the resumed model's weights, not a known version: reload

    def summary(self) -> dict:
        return {}


def sync_source(cfg: Config, session: Session) -> LockstepSource:
    return LockstepSource(cfg, session, CurrentPolicy(session.model), own_weights=False)


def simulated_source(cfg: Config, session: Session) -> LockstepSource:
    a = cfg.async_
    policies = LaggedPolicies(session.model, a.lag, a.policy_buffer, cfg.run.seed,
                              dtype=DTYPES[generation_dtype(cfg)], on_host=a.snapshots_on_host)
    return LockstepSource(cfg, session, policies, own_weights=True)
