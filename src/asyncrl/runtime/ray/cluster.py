"""Connecting to Ray, or starting the run's own cluster and ending it with the run. Nothing here
assumes one machine: with ``RAY_ADDRESS`` (a cluster the user set up, of any number of nodes) the
run joins it and leaves it as it found it.

Without ``RAY_ADDRESS`` the run starts a private cluster on this machine, on loopback only
(:func:`init_ray`), and ends it with the run: ``ray.shutdown`` on the way out, and a reaper
(:func:`asyncrl.runtime.ray.reaper.start_ray_reaper`) that kills what is left, also when the
trainer is SIGKILLed (Ray ties its GCS server and raylet to the driver, but not the raylet's agents).
The cluster keeps its files in a temp folder of its own, removed with it; the run keeps its stop
signals; a dead raylet ends the run with one line (:mod:`asyncrl.runtime.ray.local`).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import sys
from collections.abc import Collection, Iterator
from pathlib import Path

import ray

from asyncrl.core.addresses import is_loopback
from asyncrl.runtime.ray.local import RayletWatch, new_temp_dir, shutdown, stop_signals_kept
from asyncrl.runtime.ray.reaper import start_ray_reaper, stop_ray_reaper, tell_ray_reaper

SINGLE_MACHINE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"  # "0": Ray keeps a loopback node address
_reaper: int | None = None  # the pipe that keeps the private cluster's reaper waiting (reaper)
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


def init_ray(n_workers: int, trainer_gpus: Collection[int] | None = None) -> bool:
    """Connect to ``RAY_ADDRESS`` (left as the user set it up), or start a private local cluster on
    loopback whose processes a reaper ends with the run, however it ends; True when this process
    started or joined Ray (and must shut it down). ``trainer_gpus``: the indices of the trainer ranks'
    GPUs among this process's visible ones, kept out of a private cluster (actors that ask for GPUs
    of their own must not be given a trainer's); None keeps every GPU in it."""
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
    _start_private(n_workers, trainer_gpus)
    return True


def gpus_beside(trainer_gpus: Collection[int] | None, visible: str | None, count: int) -> list[str] | None:
    """The GPUs (as ``CUDA_VISIBLE_DEVICES`` entries) a private cluster may offer its actors: this
    process's visible ones (``visible``, else 0 .. ``count`` − 1) without the trainers'; None for
    all of them."""
    if trainer_gpus is None:
        return None
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible else [str(i) for i in range(count)]
    return [d for i, d in enumerate(ids) if i not in set(trainer_gpus)]


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


def _start_private(n_workers: int, trainer_gpus: Collection[int] | None = None) -> None:
    """The private cluster: in a temp folder of its own, Ray's log lines on the driver's stderr
    from ERROR up (its start-up notices would break the one-line contract), its raylet watched."""
    global _reaper, _temp_dir, _raylet_watch
    _temp_dir = new_temp_dir()
    _reaper = start_ray_reaper(os.path.dirname(os.path.abspath(ray.__file__)), _temp_dir)
    try:
        import torch

        gpus = gpus_beside(trainer_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"), torch.cuda.device_count())
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


def mute_cluster() -> None:
    """Before the run kills its actors: that is no fault, and the driver says nothing of it."""
    if _raylet_watch is not None:
        _raylet_watch.stop()


def leave_cluster() -> None:
    """End what :func:`init_ray` started (the private cluster, its reaper and folder) or joined."""
    if _temp_dir is not None:
        stop_private()
    else:
        ray.shutdown()
