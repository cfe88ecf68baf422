"""Ray backend: rollout workers as Ray actors, weights through the object store.

The trainer ``ray.put``s each new state dict and records (version, ref) in a tiny ``WeightStore``
actor; rollout actors ask the store for the latest version between decode chunks and fetch the
weights only when it moved. Nothing here assumes one machine: on a multi-node cluster
(``ray.init(address="auto")`` via ``RAY_ADDRESS``) the same code places actors anywhere.
"""

from __future__ import annotations

import os
import time

import ray
import torch

from asyncrl.runtime.worker import RolloutWorker, WorkerSpec, WorkUnit


@ray.remote(num_cpus=0)
class WeightStore:
    def __init__(self):
        self.version = -1
        self.ref = None

    def set(self, version: int, refs: list) -> None:
        self.version, self.ref = version, refs[0]  # a list keeps Ray from resolving the ref

    def latest(self) -> int:
        return self.version

    def get(self) -> tuple[int, list]:
        return self.version, [self.ref]


class RayWeightsClient:
    """The worker-side weight channel (same interface as SharedWeights)."""

    def __init__(self, store):
        self.store = store

    def latest(self) -> int:
        return ray.get(self.store.latest.remote())

    def pull(self, model: torch.nn.Module) -> int:
        version, (ref,) = ray.get(self.store.get.remote())
        model.load_state_dict(ray.get(ref))
        return version


@ray.remote(num_cpus=1)
class RolloutActor:
    def __init__(self, spec: WorkerSpec, store):
        self.worker = RolloutWorker(spec, RayWeightsClient(store))

    def ready(self) -> bool:
        return True

    def run(self, unit: WorkUnit) -> dict:
        return self.worker.run(unit)

    def pid(self) -> int:
        return os.getpid()


class RayPool:
    """Same surface as WorkerPool, plus ``publish`` (it is also the weight channel)."""

    def __init__(self, specs: list[WorkerSpec], model: torch.nn.Module, start_timeout_s: float):
        self.owns_ray = not ray.is_initialized()
        if self.owns_ray:
            address = os.environ.get("RAY_ADDRESS")
            # no address: a private local cluster on loopback, stopped again in shutdown()
            local = {} if address else {"num_cpus": max(2, len(specs) + 1), "_node_ip_address": "127.0.0.1"}
            ray.init(address=address, include_dashboard=False, log_to_driver=True, **local)
        self.specs = {s.worker_id: s for s in specs}
        self.store = WeightStore.remote()
        self.publish(model, 0)
        self.start_timeout_s = start_timeout_s
        self.actors: dict[int, object] = {}
        self.inflight: dict[int, dict[int, tuple[WorkUnit, object]]] = {i: {} for i in self.specs}
        self.restarts = 0
        for worker_id in self.specs:
            self.actors[worker_id] = RolloutActor.remote(self.specs[worker_id], self.store)

    def publish(self, model: torch.nn.Module, version: int) -> None:
        from asyncrl.policy.lora import export_state_dict  # merged weights when training LoRA

        state = {k: v.detach().cpu().clone() for k, v in export_state_dict(model).items()}
        ray.get(self.store.set.remote(version, [ray.put(state)]))

    def wait_ready(self) -> list[tuple]:
        ray.get([a.ready.remote() for a in self.actors.values()], timeout=self.start_timeout_s)
        return []

    def submit(self, unit: WorkUnit) -> int:
        worker_id = min(self.inflight, key=lambda w: (len(self.inflight[w]), w))
        self.inflight[worker_id][unit.unit_id] = (unit, self.actors[worker_id].run.remote(unit))
        return worker_id

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
                self.actors[worker_id] = RolloutActor.remote(self.specs[worker_id], self.store)
        return lost

    def shutdown(self) -> None:
        for actor in self.actors.values():
            ray.kill(actor)
        if self.owns_ray:
            ray.shutdown()
