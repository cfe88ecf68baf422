"""Ray backend: rollout workers as Ray actors; weights through the channel they are given (Ray's
object store: :mod:`asyncrl.runtime.ray.store`). Nothing here assumes one machine: on a multi-node
cluster (``RAY_ADDRESS``) the same code places actors anywhere. How the run joins Ray, or starts
and ends a cluster of its own, is :mod:`asyncrl.runtime.ray.cluster`.

On CUDA each actor asks Ray for its share of a GPU (:func:`actor_options`): Ray shows an actor only
the GPUs it was given (``CUDA_VISIBLE_DEVICES``), none to an actor that asked for none. The actors
start one at a time there, each once the one before it is ready, as the local pool's workers do.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace

import ray

from asyncrl.core.loader import ConfigError
from asyncrl.runtime.pool import report_restart, reseeded
from asyncrl.runtime.ray.cluster import leave_cluster, mute_cluster, say_where_to_resume
from asyncrl.runtime.session import run_dir_of
from asyncrl.runtime.worker import RolloutWorker, WorkerSpec, WorkUnit, starts_alone, worker_gpu_share


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


@ray.remote(num_cpus=1)
class RolloutActor:
    def __init__(self, spec: WorkerSpec, channel, after=None):
        """``after``: the previous actor's ``ready()`` reference, which Ray resolves (waiting for
        that actor) before this constructor runs; None = start now."""
        self.worker = RolloutWorker(visible_device(spec), channel)

    def ready(self) -> bool:
        return True

    def node(self) -> tuple[str, str]:
        """(Ray node id, node address) of the node this actor runs on."""
        return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address()

    def run(self, unit: WorkUnit) -> dict:
        return self.worker.run(unit)

    def pid(self) -> int:
        return os.getpid()


class RayPool:
    """Same surface as WorkerPool."""

    def __init__(self, specs: list[WorkerSpec], channel, start_timeout_s: float, owns_ray: bool = False):
        self.owns_ray = owns_ray
        self.specs = {s.worker_id: s for s in specs}
        self.channel = channel
        self.start_timeout_s = start_timeout_s
        self.actors: dict[int, object] = {}
        self.inflight: dict[int, dict[int, tuple[WorkUnit, object]]] = {i: {} for i in self.specs}
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
        ray.get([a.ready.remote() for a in self.actors.values()], timeout=self.start_timeout_s)
        if os.environ.get("RAY_ADDRESS"):  # a cluster the user set up: say where the workers went
            print(f"asyncrl: {placement_line(self.placement())}", file=sys.stderr, flush=True)
        return []

    def placement(self) -> dict[int, tuple[str, str]]:
        """{worker id: (Ray node id, node address)} of the running actors."""
        nodes = ray.get([actor.node.remote() for actor in self.actors.values()], timeout=self.start_timeout_s)
        return dict(zip(self.actors, nodes))

    def submit(self, unit: WorkUnit) -> int:
        worker_id = min(self.inflight, key=lambda w: (len(self.inflight[w]), w))
        self.inflight[worker_id][unit.unit_id] = (unit, self.actors[worker_id].run.remote(unit))
        return worker_id

    def inflight_units(self) -> list[WorkUnit]:
        """Units handed out and not yet returned, oldest first (a checkpoint re-issues them)."""
        return sorted((u for units in self.inflight.values() for u, _ in units.values()), key=lambda u: u.unit_id)

    @property
    def n_inflight(self) -> int:
        return sum(len(units) for units in self.inflight.values())

    def poll(self, timeout: float = 0.0) -> list[tuple]:
        refs = {ref: (w, uid) for w, units in self.inflight.items() for uid, (_, ref) in units.items()}
        if not refs:
            time.sleep(timeout)
            return []
        done, _ = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        messages = []
        for ref in done:
            worker_id, unit_id = refs[ref]
            try:
                payload = ray.get(ref)
            except ray.exceptions.RayActorError:
                continue  # restart_dead reports the unit as lost
            del self.inflight[worker_id][unit_id]
            messages.append(("result", worker_id, payload))
        return messages

    def restart_dead(self) -> list[WorkUnit]:
        """Restart (on any node with the resources it asks for) each actor that died holding work;
        returns the units it will never finish."""
        lost = []
        for worker_id, units in self.inflight.items():
            error = None
            for _, ref in units.values():
                done, _ = ray.wait([ref], timeout=0)
                if done:
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError as err:
                        error = err
            if error is not None:
                lost += [unit for unit, _ in units.values()]
                self.restarts += 1
                report_restart(worker_id, f"died (Ray: {type(error).__name__})", self.restarts, len(units),
                               len(self.specs))
                units.clear()
                self.actors[worker_id] = self._actor(worker_id)
        return lost

    def shutdown(self) -> None:
        if self.owns_ray:
            mute_cluster()
        for actor in self.actors.values():
            ray.kill(actor)
        if self.owns_ray:
            leave_cluster()
