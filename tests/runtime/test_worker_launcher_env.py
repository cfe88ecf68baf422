"""A rollout worker started by a torchrun rank forgets torchrun's variables before it builds its
engine: vLLM's executor would otherwise join the job's rendezvous (``env://``) as a rank it is not
and wait on a store that expects no such client."""

import os
from types import SimpleNamespace

import pytest

from asyncrl.core.loader import ConfigError
from asyncrl.distributed.launcher_env import forget_launcher
from asyncrl.runtime import worker

TORCHRUN = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True", "TORCHELASTIC_RUN_ID": "x",
            "GROUP_RANK": "0", "ROLE_RANK": "0", "ROLE_WORLD_SIZE": "2"}


@pytest.fixture(autouse=True)
def _restore_environ():
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)


def _engineless(monkeypatch, module) -> dict:
    """``module.RolloutWorker`` replaced by a stand-in that records the environment the worker's
    engine would start in, then stops with a ConfigError; the dict it fills."""
    seen = {}

    class Engineless:
        def __init__(self, spec, channel):
            seen.update(os.environ)
            raise ConfigError("rollout.engine", "stop here")

    monkeypatch.setattr(module, "RolloutWorker", Engineless)
    return seen


def test_the_launchers_keys_are_forgotten_and_nothing_else():
    environ = {**TORCHRUN, "PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}
    assert sorted(forget_launcher(environ)) == sorted(TORCHRUN)
    assert environ == {"PATH": "/usr/bin", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"}


def test_a_worker_builds_its_engine_without_them(monkeypatch):
    for key, value in TORCHRUN.items():
        monkeypatch.setenv(key, value)
    seen = _engineless(monkeypatch, worker)
    sent = []
    spec = SimpleNamespace(cpu=None, worker_id=0, config={"async": {"worker_timeout_s": 5}})
    worker.worker_main(spec, None, None, SimpleNamespace(put=sent.append), None)
    assert sent[0][0] == "fatal" and seen and not set(TORCHRUN) & set(seen)


def test_a_ray_actor_builds_its_engine_without_them(monkeypatch):
    """A private Ray cluster started by rank 0 under torchrun copies rank 0's environment into its
    worker processes: the actor forgets the launcher's keys as a local worker does."""
    from asyncrl.runtime.ray import backend

    for key, value in TORCHRUN.items():
        monkeypatch.setenv(key, value)
    seen = _engineless(monkeypatch, backend)
    actor_class = backend.RolloutActor.__ray_metadata__.modified_class  # the class Ray runs, without Ray
    with pytest.raises(ConfigError):
        actor_class(SimpleNamespace(config={}), None)
    assert seen and not set(TORCHRUN) & set(seen)


def test_a_worker_builds_its_engine_with_the_nccl_settings_from_before_the_trainers(monkeypatch):
    """The trainer sets clean-up-only NCCL error handling for its own process (asyncrl.distributed.
    nccl_env); its worker processes inherit that, and take back the values from before it."""
    from asyncrl.distributed import nccl_env

    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # the user's
    for name in ("TORCH_NCCL_DUMP_ON_TIMEOUT", nccl_env.SAVED_ENV):
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    nccl_env.set_fault_env()
    assert os.environ["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"
    seen = _engineless(monkeypatch, worker)
    spec = SimpleNamespace(cpu=None, worker_id=0, config={"async": {"worker_timeout_s": 5}})
    worker.worker_main(spec, None, None, SimpleNamespace(put=lambda item: None), None)
    assert seen["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in seen and nccl_env.SAVED_ENV not in seen
