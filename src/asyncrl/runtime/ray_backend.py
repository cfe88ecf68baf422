"""Ray backend: rollout workers as Ray actors; weights through the channel they are given (Ray's
object store: :mod:`asyncrl.runtime.channels.ray_store`). Nothing here assumes one machine: on a
multi-node cluster (``RAY_ADDRESS``) the same code places actors anywhere.

Without ``RAY_ADDRESS`` the run starts a private cluster on this machine, on loopback only
(:func:`init_ray`), and ends it with the run: ``ray.shutdown`` on the way out, and a reaper
(:func:`asyncrl.runtime.worker_entry.start_ray_reaper`) that kills what is left, also when the
trainer is SIGKILLed (Ray ties its GCS server and raylet to the driver, but not the raylet's agents).
The cluster keeps its files in a temp folder of its own, removed with it; the run keeps its stop
signals; a dead raylet ends the run with one line (:mod:`asyncrl.runtime.ray_local`).

On CUDA each actor asks Ray for its share of a GPU (:func:`actor_options`): Ray shows an actor only
the GPUs it was given (``CUDA_VISIBLE_DEVICES``), none to an actor that asked for none. The actors
start one at a time there, each once the one before it is ready, as the local pool's workers do.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import ray

from asyncrl.core.loader import ConfigError
from asyncrl.core.addresses import is_loopback
from asyncrl.runtime.pool import report_restart, reseeded
from asyncrl.runtime.ray_local import RayletWatch, new_temp_dir, shutdown, stop_signals_kept
from asyncrl.runtime.session import run_dir_of
from asyncrl.runtime.worker import RolloutWorker, WorkerSpec, WorkUnit, starts_alone, worker_gpu_share
from asyncrl.runtime.worker_entry import start_ray_reaper, stop_ray_reaper, tell_ray_reaper

SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps a loopback node address
_reaper: int | None = None  # the pipe that keeps the private cluster's reaper waiting (worker_entry)
_temp_dir: str | None = None  # the private cluster's temp folder
_raylet_watch: RayletWatch | None = None  # the private cluster's raylet, watched


@contextlib.contextmanager
def _loopback_only() -> Iterator[None]:
    """While a private cluster starts: node address 127.0.0.1, so that every Ray server (GCS,
    raylet, object manager, agents, the workers' and the driver's gRPC) listens on loopback only.
    Ray turns a loopback node address into the machine's routable one unless clusters are
    disabled (its setting for a single machine: the default on macOS and Windows), read at import
    time in this process and from the environment in the processes it starts."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    saved_env = os.environ.get(SINGLE_MACHINE_ENV)
    saved_flag = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[SINGLE_MACHINE_ENV] = "0"
    if saved_flag is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved_flag is not None:
            constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(SINGLE_MACHINE_ENV, None)
        else:
            os.environ[SINGLE_MACHINE_ENV] = saved_env


def _on_loopback(address: str) -> bool:
    """Whether ``RAY_ADDRESS`` (``host:port``, or ``auto``/``ray://...``) names a loopback host."""
    return is_loopback(address.removeprefix("ray://").rsplit(":", 1)[0])


def _cluster_output_on_stderr() -> None:
    """What Ray's driver prints for the cluster (the notices it publishes, such as a dead worker's
    "(raylet) A worker died ...", which Ray prints on stdout; the actors' output) goes to stderr:
    stdout is the run's own. ``print_worker_logs`` is where every such line is printed (the
    error-notice thread, the actors' log thread, the batch flushed at disconnect). Where Ray's
    internals differ from 2.60's, nothing changes."""
    module = getattr(getattr(ray, "_private", None), "worker", None)
    original = getattr(module, "print_worker_logs", None)
    if original is None or getattr(original, "asyncrl_on_stderr", False):
        return

    def print_on_stderr(data, print_file, *args, **kwargs):
        return original(data, sys.stderr if print_file is sys.stdout else print_file, *args, **kwargs)

    print_on_stderr.asyncrl_on_stderr = True
    module.print_worker_logs = print_on_stderr


def init_ray(n_workers: int, trainer_gpu: int | None = None) -> bool:
    """Connect to ``RAY_ADDRESS`` (left as the user set it up), or start a private local cluster on
    loopback whose processes a reaper ends with the run, however it ends; True when this process
    started or joined Ray (and must shut it down). ``trainer_gpu``: the index of the trainer's GPU
    among this process's visible ones, kept out of a private cluster (actors that ask for GPUs of
    their own must not be given the trainer's); None keeps every GPU in it."""
    if ray.is_initialized():
        return False
    _cluster_output_on_stderr()
    address = os.environ.get("RAY_ADDRESS")
    if address and _on_loopback(address):  # Ray would rewrite 127.0.0.1 into a routable address it cannot reach
        with _loopback_only(), stop_signals_kept():
            ray.init(address=address, _node_ip_address="127.0.0.1", include_dashboard=False, log_to_driver=True)
        return True
    if address:
        with stop_signals_kept():
            ray.init(address=address, include_dashboard=False, log_to_driver=True)
        return True
    _start_private(n_workers, trainer_gpu)
    return True


def gpus_beside(trainer_gpu: int | None, visible: str | None, count: int) -> list[str] | None:
    """The GPUs (as ``CUDA_VISIBLE_DEVICES`` entries) a private cluster may offer its actors: this
    process's visible ones (``visible``, else 0 .. ``count`` − 1) without the trainer's; None for
    all of them."""
    if trainer_gpu is None:
        return None
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(count)]
    return [d for i, d in enumerate(ids) if i != trainer_gpu]


@contextlib.contextmanager
def _ray_sees(gpus: list[str] | None) -> Iterator[dict]:
    """While the cluster starts, its processes see ``gpus`` (they inherit this environment; Ray
    counts and assigns the GPUs of ``CUDA_VISIBLE_DEVICES``): ``ray.init``'s ``num_gpus``. This
    process has its devices already and keeps them."""
    if gpus is None:
        yield {}
        return
    saved = os.environ.get("CUDA_VISIBLE_DEVICES")
    os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
    try:
        yield {"num_gpus": len(gpus)}
    finally:
        if saved is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = saved


def _start_private(n_workers: int, trainer_gpu: int | None = None) -> None:
    """The private cluster: in a temp folder of its own, Ray's log lines on the driver's stderr
    from ERROR up (its start-up notices would break the one-line contract), its raylet watched."""
    global _reaper, _temp_dir, _raylet_watch
    _temp_dir = new_temp_dir()
    _reaper = start_ray_reaper(os.path.dirname(os.path.abspath(ray.__file__)), _temp_dir)
    try:
        import torch

        gpus = gpus_beside(trainer_gpu, os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
        with _loopback_only(), stop_signals_kept(), _ray_sees(gpus) as gpu_args:
            ray.init(num_cpus=max(2, n_workers + 1), _node_ip_address="127.0.0.1", include_dashboard=False,
                     log_to_driver=True, _temp_dir=_temp_dir, logging_level=logging.ERROR, **gpu_args)
        _raylet_watch = RayletWatch.of_child_raylet(_reaper)
    except BaseException:
        stop_private()  # what the failed start left running goes now
        raise
    # a run that ends before its pool is shut down (an error while it starts): before Ray's own
    # exit hook, which would stop the raylet under the watch
    atexit.register(stop_private)


def stop_private() -> None:
    """Stop the private cluster (a no-op without one): Ray's shutdown, the reaper for what it left,
    the temp folder (the reaper removes it too, after its kills)."""
    global _reaper, _temp_dir, _raylet_watch
    atexit.unregister(stop_private)
    tell_ray_reaper(_reaper, "stopping")  # the raylet's end is no fault now
    if _raylet_watch is not None:
        _raylet_watch.stop()
    try:
        shutdown()
    finally:
        if _raylet_watch is not None:
            _raylet_watch.unmuted()  # the driver has disconnected: a later cluster's notices are printed
        stop_ray_reaper(_reaper)  # what Ray's shutdown left running is killed now
        if _temp_dir is not None:
            shutil.rmtree(_temp_dir, ignore_errors=True)
        _reaper, _temp_dir, _raylet_watch = None, None, None


def say_where_to_resume(run_dir: Path) -> None:
    """The run directory that the line a dead raylet ends the run with names."""
    if _raylet_watch is not None:
        _raylet_watch.run_dir = str(run_dir)
    tell_ray_reaper(_reaper, f"run {run_dir}")


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
        if self.owns_ray and _raylet_watch is not None:
            _raylet_watch.stop()  # killing the actors below is no fault: the driver says nothing of it
        for actor in self.actors.values():
            ray.kill(actor)
        if not self.owns_ray:
            return
        if _temp_dir is not None:
            stop_private()
        else:
            ray.shutdown()
