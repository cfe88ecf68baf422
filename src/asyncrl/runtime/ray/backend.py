"""Ray backend: rollout workers as Ray actors; weights through the channel they are given (Ray's
object store: :mod:`asyncrl.runtime.ray.store`). Nothing here assumes one machine: on a multi-node
cluster (``RAY_ADDRESS``) the same code places actors anywhere. How the run joins Ray, or starts
and ends a cluster of its own, is :mod:`asyncrl.runtime.ray.cluster`.

On CUDA each actor asks Ray for its share of a GPU (:func:`actor_options`): Ray shows an actor only
the GPUs it was given (``CUDA_VISIBLE_DEVICES``), none to an actor that asked for none. The actors
start one at a time there, each once the one before it is ready, as the local pool's workers do.

Episodes stream as on the local backend (:mod:`asyncrl.runtime.episode_stream`): an actor whose
rollout plays episodes runs the local worker's loop in a thread of its own
(:class:`~asyncrl.runtime.worker.EpisodeThread`); the pool hands it units (``add``) and keeps one
``take`` call outstanding per such actor, which answers with the groups that ended so far. Each
group reaches the buffer as it ends, and the episodes still playing stay in flight across units.
Single completions keep one ``run`` call per unit.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

import ray

from asyncrl.core.errors import as_payload, from_payload
from asyncrl.core.loader import ConfigError
from asyncrl.distributed.launcher_env import forget_launcher
from asyncrl.distributed.nccl_env import restore_env
from asyncrl.runtime.pool import InputError, WorkerError, report_restart, reseeded, take_delivered
from asyncrl.runtime.ray.cluster import leave_cluster, mute_cluster, say_where_to_resume
from asyncrl.runtime.session import run_dir_of
from asyncrl.runtime.worker import (EpisodeThread, RolloutWorker, WorkerSpec, WorkUnit, starts_alone,
                                   worker_gpu_share)


TAKE_WAIT_S = 1.0  # how long a take waits in the actor for a group before it answers with none
STOP_WAIT_S = 2.0  # at shutdown, how long the pool waits for the actors' episode loops to end


def _config_of(spec: WorkerSpec):
    from asyncrl.config import Config
    from asyncrl.core.loader import from_dict
    from asyncrl.runtime.validate import validate_run

    return validate_run(from_dict(Config, spec.config))


def actor_options(spec: WorkerSpec) -> dict:
    """``RolloutActor.options(...)``: one CPU, and on CUDA the worker's share of a GPU."""
    share = worker_gpu_share(_config_of(spec))
    return {"num_cpus": 1, "num_gpus": share} if share > 0 else {"num_cpus": 1}


def check_gpus(specs: list[WorkerSpec]) -> None:
    """One line instead of actors that wait for GPUs the cluster does not have (on a private
    cluster only: a joined one may add GPU nodes on demand)."""
    wanted = sum(actor_options(s).get("num_gpus", 0.0) for s in specs)
    have = ray.cluster_resources().get("GPU", 0.0)
    if wanted > have + 1e-9:
        raise ConfigError("async.gpus_per_worker", f"the rollout actors ask for {wanted:g} GPUs in all and the "
                                                   f"Ray cluster has {have:g}")


def visible_device(spec: WorkerSpec) -> WorkerSpec:
    """Inside an actor its GPU is ``cuda`` (index 0 of the GPUs Ray shows it), whatever index
    ``policy.device`` or ``reward.model_device`` names on the trainer's machine (``cuda:1`` does
    not exist in an actor shown one GPU)."""
    config = dict(spec.config)
    for section, key in (("policy", "device"), ("reward", "model_device")):
        part = config.get(section) or {}
        if str(part.get(key, "")).startswith("cuda"):
            config[section] = {**part, key: "cuda"}
    return spec if config == spec.config else replace(spec, config=config)


def placement_line(placement: dict[int, tuple[str, str]]) -> str:
    """``rollout workers on Ray nodes: 0 -> 4844c7f5 (10.0.0.7), ...`` (node ids shortened)."""
    where = ", ".join(f"{worker} -> {node[:8]} ({address})" for worker, (node, address) in sorted(placement.items()))
    return f"rollout workers on Ray nodes: {where}"


class ActorFatal(Exception):
    """A rollout actor's :class:`ConfigError` as data (:func:`asyncrl.core.errors.as_payload`). Ray
    pickles an actor's exception for the trainer, and a ConfigError cannot be rebuilt from its
    pickle (its ``__init__`` takes a key and a message): the trainer would get Ray's
    ``UnserializableException`` and a traceback. The pool raises the error again as its own class
    with its one line, as the local pool does with a worker's ``fatal`` message."""

    def __init__(self, payload: dict):
        super().__init__(payload)
        self.payload = payload


# Threads of the actor's own beside the default group (Ray's concurrency groups): a plain
# max_concurrency would run ``run`` calls at once on one engine, and out of the order sent
@ray.remote(num_cpus=1, concurrency_groups={"feed": 1, "take": 1})
class RolloutActor:
    """A rollout worker in a Ray actor. ``run`` (single completions) stays in Ray's default group:
    one call at a time, in the order sent, as before. On episodes ``add`` (and ``stop``) and ``take``
    have a thread each: a ``take`` that waits for a group holds up no ``add``, units join in the
    order sent, and neither waits for the episode loop, which has a thread of its own."""

    def __init__(self, spec: WorkerSpec, channel, after=None):
        """``after``: the previous actor's ``ready()`` reference, which Ray resolves (waiting for
        that actor) before this constructor runs; None = start now."""
        restore_env()  # as worker_main: a Ray process started by a rank inherits the rank's NCCL settings
        # a private cluster started by rank 0 under torchrun gives its worker processes rank 0's
        # environment: vLLM's own torch.distributed set-up would join the job's rendezvous
        forget_launcher()
        self.worker = RolloutWorker(visible_device(spec), channel)
        # as worker_main decides: a rollout that plays episodes keeps them in flight across units
        self.episodes = EpisodeThread(self.worker) if hasattr(self.worker.rollout, "play") else None

    def ready(self) -> bool:
        return True

    def node(self) -> tuple[str, str]:
        """(Ray node id, node address) of the node this actor runs on."""
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def run(self, unit: WorkUnit) -> dict:
        try:
            return self.worker.run(unit)
        except ConfigError as err:
            raise ActorFatal(as_payload(err)) from None

    @ray.method(concurrency_group="feed")
    def add(self, unit: WorkUnit) -> None:
        if self.episodes is None:
            raise RuntimeError("RolloutActor.add: this worker's rollout plays no episodes; send its units to run")
        self.episodes.add(unit)

    @ray.method(concurrency_group="take")
    def take(self, timeout_s: float) -> list[dict]:
        """The payloads of the groups that ended since the last take (waits up to ``timeout_s`` for
        the first); the episode loop's error, once it died, raised here for the trainer."""
        try:
            return self.episodes.take(timeout_s)
        except ConfigError as err:
            raise ActorFatal(as_payload(err)) from None

    @ray.method(concurrency_group="feed")
    def stop(self) -> None:
        if self.episodes is not None:
            self.episodes.stop(STOP_WAIT_S / 2)

    def pid(self) -> int:
        return os.getpid()


def _got(ref):
    """``ray.get(ref)`` of a finished call; an actor's ConfigError raised as its class (one line)."""
    try:
        return ray.get(ref)
    except ActorFatal as err:
        raise from_payload(err.payload, InputError) from None


class RayPool:
    """Same surface as WorkerPool. ``inflight``: per worker, its units handed out and not yet
    delivered, as the local pool keeps them (:func:`~asyncrl.runtime.pool.take_delivered`)."""

    def __init__(self, specs: list[WorkerSpec], channel, start_timeout_s: float, owns_ray: bool = False):
        self.owns_ray = owns_ray
        self.specs = {s.worker_id: s for s in specs}
        self.channel = channel
        self.start_timeout_s = start_timeout_s
        self.actors: dict[int, object] = {}
        self.inflight: dict[int, dict[int, WorkUnit]] = {i: {} for i in self.specs}
        self.runs: dict[object, tuple[int, int]] = {}  # run reference -> (worker id, unit id)
        self.takes: dict[int, object] = {}  # worker id -> its outstanding take reference
        self.adds: list = []  # add references not yet read (an error left unread, Ray would log it)
        # make_rollout's own test (the workers share one config): a run with an environment or tools
        # plays episodes, and its actors stream them (RolloutActor checks the rollout itself)
        self.streams = bool(specs) and _config_of(specs[0]).env.episodes
        self.restarts = 0
        try:
            if owns_ray:
                say_where_to_resume(run_dir_of(_config_of(specs[0])))
                check_gpus(specs)
            before = None  # the ready() reference of the actor the next one waits for
            for worker_id, spec in self.specs.items():
                after = before if starts_alone(spec) else None
                self.actors[worker_id] = self._actor(worker_id, after)
                before = self.actors[worker_id].ready.remote()
        except BaseException:
            self.shutdown()  # the run never gets the pool that would stop them
            raise

    def _actor(self, worker_id: int, after=None):
        spec = reseeded(self.specs[worker_id], self.restarts)
        return RolloutActor.options(**actor_options(spec)).remote(spec, self.channel, after)

    def wait_ready(self) -> list[tuple]:
        """Block until every actor is ready, each within ``start_timeout_s`` of its own start, as
        the local pool bounds each worker: on CUDA an actor starts once the one before it is ready
        (:func:`starts_alone`), elsewhere all start together with the pool."""
        began = time.monotonic()
        for order, (worker_id, actor) in enumerate(self.actors.items()):
            if order and starts_alone(self.specs[worker_id]):
                began = time.monotonic()  # the one before it is ready: its start began now
            ref = actor.ready.remote()
            done, _ = ray.wait([ref], timeout=max(0.0, began + self.start_timeout_s - time.monotonic()))
            if not done:
                raise WorkerError(f"rollout worker {worker_id} was not ready {self.start_timeout_s:.0f} s after its "
                                  f"start (async.worker_start_timeout_s={self.start_timeout_s:g})")
            ray.get(ref)  # an actor that failed to start raises its error here
        if os.environ.get("RAY_ADDRESS"):  # a cluster the user set up: say where the workers went
            print(f"asyncrl: {placement_line(self.placement())}", file=sys.stderr, flush=True)
        return []

    def placement(self) -> dict[int, tuple[str, str]]:
        """{worker id: (Ray node id, node address)} of the running actors."""
        nodes = ray.get([actor.node.remote() for actor in self.actors.values()], timeout=self.start_timeout_s)
        return dict(zip(self.actors, nodes))

    def submit(self, unit: WorkUnit) -> int:
        worker_id = min(self.inflight, key=lambda w: (len(self.inflight[w]), w))
        self.inflight[worker_id][unit.unit_id] = unit
        actor = self.actors[worker_id]
        if self.streams:
            self.adds.append(actor.add.remote(unit))
            if worker_id not in self.takes:
                self.takes[worker_id] = actor.take.remote(TAKE_WAIT_S)
        else:
            self.runs[actor.run.remote(unit)] = (worker_id, unit.unit_id)
        return worker_id

    def inflight_units(self) -> list[WorkUnit]:
        """Units handed out and not yet returned, oldest first (a checkpoint re-issues them); of a
        unit whose groups stream, the groups not yet delivered."""
        return sorted((u for units in self.inflight.values() for u in units.values()), key=lambda u: u.unit_id)

    @property
    def n_inflight(self) -> int:
        return sum(len(units) for units in self.inflight.values())

    def poll(self, timeout: float = 0.0) -> list[tuple]:
        """Results available now (waits up to ``timeout`` for the first): a unit's, or on episodes
        each group that ended. An actor's ConfigError raises."""
        self._read_adds()
        refs = {**{ref: (w, uid) for ref, (w, uid) in self.runs.items()},
                **{ref: (w, None) for w, ref in self.takes.items()}}
        if not refs:
            time.sleep(timeout)
            return []
        done, _ = ray.wait(list(refs), num_returns=1, timeout=timeout)
        if done:
            done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        messages = []
        for ref in done:
            worker_id, unit_id = refs[ref]
            try:
                got = _got(ref)
            except ray.exceptions.RayActorError:
                continue  # restart_dead reports its units as lost
            if unit_id is not None:  # a run: the whole unit
                del self.runs[ref]
                payloads = [got]
            else:  # a take: the groups that ended since the last one
                del self.takes[worker_id]
                payloads = got
            for payload in payloads:
                if take_delivered(self.inflight[worker_id], payload):
                    messages.append(("result", worker_id, payload))
            if unit_id is None and self.inflight[worker_id]:  # groups still playing: the next take
                self.takes[worker_id] = self.actors[worker_id].take.remote(TAKE_WAIT_S)
        return messages

    def _read_adds(self) -> None:
        """Read the finished ``add`` calls: an add to a dead actor fails, which its take reports."""
        if not self.adds:
            return
        done, self.adds = ray.wait(self.adds, num_returns=len(self.adds), timeout=0)
        for ref in done:
            try:
                _got(ref)
            except ray.exceptions.RayActorError:
                pass

    def restart_dead(self) -> list[WorkUnit]:
        """Restart (on any node with the resources it asks for) each actor that died holding work;
        returns the units it will never finish (on episodes, the groups it had not delivered)."""
        lost = []
        for worker_id, units in self.inflight.items():
            runs = [ref for ref, (w, _) in self.runs.items() if w == worker_id]
            error = _actor_died(runs + ([self.takes[worker_id]] if worker_id in self.takes else []))
            if error is None:
                continue
            lost += list(units.values())
            self.restarts += 1
            report_restart(worker_id, f"died (Ray: {type(error).__name__})", self.restarts, len(units),
                           len(self.specs))
            units.clear()
            for ref in runs:
                del self.runs[ref]
            self.takes.pop(worker_id, None)
            self.actors[worker_id] = self._actor(worker_id)
        return lost

    def shutdown(self) -> None:
        if self.owns_ray:
            mute_cluster()
        if self.streams and self.actors:  # the episode loops end at their next turn; bounded wait
            ray.wait([actor.stop.remote() for actor in self.actors.values()], num_returns=len(self.actors),
                     timeout=STOP_WAIT_S)
        for actor in self.actors.values():
            ray.kill(actor)
        if self.owns_ray:
            leave_cluster()


def _actor_died(refs: list):
    """The RayActorError of the first finished reference that has one (its actor died), else None."""
    done, _ = ray.wait(refs, num_returns=len(refs), timeout=0) if refs else ([], [])
    for ref in done:
        try:
            ray.get(ref)
        except ray.exceptions.RayActorError as err:
            return err
        except Exception:  # noqa: BLE001 (the actor's own error: poll raises it)
            continue
    return None
