"""``asyncrl plan`` on N GPUs: the layouts the runtime can run there, each planned GPU by GPU
(:mod:`asyncrl.plan.gpus`), and the one chosen: the shortest estimated step among those that fit
every GPU (on a tie, the engines beside rank 0, which need no Ray cluster; then more trainer ranks).

The layouts are the placements the runtime makes (docs/scaling.md, "Choosing a layout"):

* **beside rank 0**: N trainer ranks, one GPU each (torchrun; a rank uses GPU ``LOCAL_RANK``), and
  the rollout engines on rank 0's GPU: local worker processes run on ``policy.device``
  (``async.backend=local``), and sync and simulated runs generate in rank 0's own process. The only
  layout outside async mode on CUDA.
* **own rollout GPUs** (async on CUDA): T < N trainer ranks on GPUs 0..T-1 and one rollout worker on
  each of the other N − T GPUs, a Ray actor asking for a whole GPU (``async.backend=ray
  async.gpus_per_worker=1``). One trainer process starts a private Ray cluster without its own GPU.
  With several ranks a private cluster would keep out only rank 0's GPU and could give an actor
  another rank's, so the rollout GPUs get a Ray cluster of their own, which the run joins
  (``RAY_ADDRESS``).

Not planned: vLLM asleep on a trainer's GPU between generations (``enable_sleep_mode``). The engine
sleeps only after a ``generate``, which async workers run back to back; sync runs, whose engine
would sleep through each train step, may not run vLLM on several ranks; and nothing returns the
trainer's cached memory to the GPU before the engine wakes.

Each layout's config is the user's plus the keys the layout sets (:attr:`Layout.overrides`), loaded
and checked as ``asyncrl train`` loads it; a layout the trainer would refuse at start-up (fewer
minibatch rows than ranks, LoRA on several ranks, vLLM in rank 0's process under torchrun) is listed
with that reason and not chosen.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from asyncrl.plan.estimate import DTYPE_BYTES, GIB, PlanInputs, Rates, StepTime, inputs_from_config, step_time
from asyncrl.plan.gpus import GpuRole, job_gpus

BESIDE, OWN = "beside rank 0", "own rollout GPUs"
IGNORED = ("task", "reward")  # sections that change no memory (asyncrl plan's --config)


@dataclass
class Layout:
    """``trainers`` ranks on a GPU each and the rollout engines beside rank 0 (``rollout_gpus`` 0) or
    on ``rollout_gpus`` GPUs of their own; planned by :func:`plan_layouts`, else ``refused``."""

    kind: str  # BESIDE or OWN
    trainers: int
    rollout_gpus: int
    overrides: dict[str, str] = field(default_factory=dict)  # config keys the layout sets
    inputs: PlanInputs | None = None
    roles: list[GpuRole] = field(default_factory=list)
    time: StepTime | None = None
    channel: str = ""  # the weight channel the run opens (async)
    refused: str = ""  # the trainer's reason for refusing it at start-up

    def fits(self, rates: Rates) -> bool:
        return not self.refused and all(role.fits(rates) for role in self.roles)

    @property
    def largest(self) -> int:
        """Bytes of the fullest GPU."""
        return max((role.total for role in self.roles), default=0)

    @property
    def label(self) -> str:
        trainers = f"{self.trainers} trainer GPU{'s' if self.trainers > 1 else ''}"
        if self.kind == BESIDE:
            return f"{trainers}, rollout beside rank 0"
        return f"{trainers} + {self.rollout_gpus} rollout GPU{'s' if self.rollout_gpus > 1 else ''}"


def plan_layouts(config, overrides, shape, gpus: int, prompt_tokens: int, rates: Rates,
                 trainers: int | None = None) -> list[Layout]:
    """Every layout of ``gpus`` GPUs for the run ``config`` + ``overrides`` (only the one with
    ``trainers`` ranks when given), each planned or refused. ValueError for a bad config or flag."""
    from asyncrl.runtime.validate import load_run_config
    from asyncrl.core.registries import device_type

    base = load_run_config(config, overrides, ignore=IGNORED)
    layouts = [Layout(BESIDE, gpus, 0, _beside_overrides(base))]
    if base.run.mode == "async" and device_type(base.policy.device) == "cuda":
        layouts += [Layout(OWN, t, gpus - t, _own_overrides(base, gpus - t)) for t in range(gpus - 1, 0, -1)]
    if trainers is not None:
        if not 1 <= trainers <= gpus:
            raise ValueError(f"--trainer-gpus: must be between 1 and --gpus ({gpus}), got {trainers}")
        layouts = [layout for layout in layouts if layout.trainers == trainers]
        if not layouts:
            raise ValueError(f"--trainer-gpus: {trainers} of {gpus} GPUs leaves rollout GPUs of their own, which "
                             "only async runs on CUDA have (run.mode=async, policy.device=cuda)")
    for layout in layouts:
        _evaluate(layout, config, overrides, shape, prompt_tokens, rates)
    return layouts


def _evaluate(layout: Layout, config, overrides, shape, prompt_tokens: int, rates: Rates) -> None:
    """Plan ``layout`` from the config it implies, or say why the trainer would refuse it."""
    from asyncrl.runtime.validate import load_run_config
    from asyncrl.objectives.micro_batching import check_micro_batching
    from asyncrl.runtime.validate import check_in_process_engine
    from asyncrl.distributed.config import check_ranks
    from asyncrl.runtime.channels import channel_name

    settings = [*overrides, *(f"{key}={value}" for key, value in layout.overrides.items())]
    try:
        cfg = load_run_config(config, settings, ignore=IGNORED)
        check_micro_batching(cfg.loss, cfg.trainer, ranks=layout.trainers)
        check_ranks(cfg, layout.trainers)
        check_in_process_engine(cfg.rollout, cfg.run.mode, layout.trainers)
        layout.inputs = inputs_from_config(cfg, shape, layout.trainers, prompt_tokens)
    except ValueError as err:  # ConfigError too
        layout.refused = str(err)
        return
    if cfg.run.mode == "async":
        layout.channel = channel_name(cfg.async_.weight_channel, cfg.async_.backend, cfg.policy.device)
    layout.roles = job_gpus(layout.inputs, rates)
    layout.time = step_time(layout.inputs, rates)


def _beside_overrides(cfg) -> dict[str, str]:
    """The config as it is when its engines already sit beside rank 0 (or generation runs in rank
    0's process); else local workers, with a channel that reaches them."""
    from asyncrl.core.registries import CHANNELS
    from asyncrl.runtime.worker import engines_beside_trainer

    if cfg.run.mode != "async" or engines_beside_trainer(cfg) or not cfg.policy.device.startswith("cuda"):
        return {}
    settings = {"async.backend": "local"}
    channel = cfg.async_.weight_channel
    if channel != "auto" and CHANNELS[channel].refuses("local", cfg.policy.device):
        settings["async.weight_channel"] = "auto"  # collective or ray: not to a worker on rank 0's GPU
    return settings


def _own_overrides(cfg, workers: int) -> dict[str, str]:
    """Ray actors on a whole GPU each, one per rollout GPU, with the configured channel if it reaches
    them (ray, collective), else ``auto`` (Ray's object store); only the keys the config differs in."""
    from asyncrl.core.registries import CHANNELS

    settings = {"async.backend": "ray", "async.gpus_per_worker": "1", "async.n_workers": str(workers)}
    channel = cfg.async_.weight_channel
    if channel != "auto" and CHANNELS[channel].refuses("ray", cfg.policy.device):
        settings["async.weight_channel"] = "auto"
    current = {"async.backend": cfg.async_.backend, "async.gpus_per_worker": cfg.async_.gpus_per_worker,
               "async.n_workers": cfg.async_.n_workers, "async.weight_channel": channel}
    return {key: value for key, value in settings.items() if str(current[key]) not in (value, f"{value}.0")}


def choose(layouts: list[Layout], rates: Rates) -> Layout:
    """The fitting layout with the shortest step; when none fits, the one whose fullest GPU is
    the least full. ValueError (the first layout's reason) when the trainer refuses them all."""
    planned = [layout for layout in layouts if not layout.refused]
    if not planned:
        raise ValueError(layouts[0].refused)
    fitting = [layout for layout in planned if layout.fits(rates)]
    if fitting:
        # steps within 10 ms are a tie: the placeholder rates decide nothing finer
        return min(fitting, key=lambda lay: (round(lay.time.step, 2), lay.kind != BESIDE, -lay.trainers))
    return min(planned, key=lambda layout: layout.largest)


def commands(layout: Layout, config: str, overrides, model_path: str | None = None) -> list[str]:
    """The shell commands that start ``layout`` on one machine: ``asyncrl train`` with the layout's
    keys (``--nproc-per-node`` for several ranks), and for rollout GPUs beside several ranks a Ray
    cluster on those GPUs alone, started first and joined through ``RAY_ADDRESS=auto``."""
    settings = [*([f"policy.model_path={model_path}"] if model_path else []), *overrides,
                *(f"{key}={value}" for key, value in layout.overrides.items())]
    ranks = ["--nproc-per-node", str(layout.trainers)] if layout.trainers > 1 else []
    train = shlex.join(["asyncrl", "train", *ranks, "--config", str(config), *settings])
    if layout.kind == BESIDE or layout.trainers == 1:  # one trainer: its private cluster leaves out its GPU
        return [train]
    ids = ",".join(str(gpu) for gpu in range(layout.trainers, layout.trainers + layout.rollout_gpus))
    return [f"CUDA_VISIBLE_DEVICES={ids} ray start --head --num-gpus {layout.rollout_gpus}",
            f"RAY_ADDRESS=auto {train}", "ray stop"]


def host_note(layout: Layout) -> str:
    """What the weight channel holds outside the GPUs, which no GPU line counts ('' for none)."""
    p = layout.inputs
    if p is None or p.device != "cuda":
        return ""
    weights = p.model.params * DTYPE_BYTES[p.rollout_dtype] / GIB
    if layout.channel == "ray":
        return (f"weight channel ray: nothing on a GPU; in host memory the trainer's pinned buffer "
                f"({weights:.2f} GiB) and Ray's object store, which holds each version ({weights:.2f} GiB) "
                "while a worker still reads it")
    return ""
