"""Ray backend: rollout workers as Ray actors; weights through the channel they are given (Ray's
object store: :mod:`asyncrl.runtime.channels.ray_store`). Nothing here assumes one machine: on a
multi-node cluster (``RAY_ADDRESS``) the same code places actors anywhere.
"""

from __future__ import annotations

import os
import time

import ray

from asyncrl.runtime.worker import RolloutWorker, WorkerSpec, WorkUnit


def init_ray(n_workers: int) -> bool:
    """Connect to ``RAY_ADDRESS`` or start a private local cluster on loopback; True when this
    process started Ray (and must stop it)."""
    if ray.is_initialized():
        return False
    address = os.environ.get("RAY_ADDRESS")
    local = {} if address else {"num_cpus": max(2, n_workers + 1), "_node_ip_address": "127.0.0.1"}
    ray.init(address=address, include_dashboard=False, log_to_driver=True, **local)
    return True


@ray.remote(num_cpus=1)
class RolloutActor:
    def __init__(self, spec: WorkerSpec, channel):
        self.worker = RolloutWorker(spec, channel)

    def ready(self) -> bool:
        return True

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
        for worker_id in self.specs:
            self.actors[worker_id] = RolloutActor.remote(self.specs[worker_id], self.channel)

    def wait_ready(self) -> list[tuple]:
        ray.get([a.ready.remote() for a in self.actors.values()], timeout=self.start_timeout_s)
        return []

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
        lost = []
        for worker_id, units in self.inflight.items():
            dead = False
            for unit_id, (unit, ref) in list(units.items()):
                done, _ = ray.wait([ref], timeout=0)
                if done:
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayActorError:
                        dead = True
            if dead:
                lost += [unit for unit, _ in units.values()]
                units.clear()
                self.restarts += 1
                self.actors[worker_id] = RolloutActor.remote(self.specs[worker_id], self.channel)
        return lost

    def shutdown(self) -> None:
        for actor in self.actors.values():
            ray.kill(actor)
        if self.owns_ray:
            ray.shutdown()
