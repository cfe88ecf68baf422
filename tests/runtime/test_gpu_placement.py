"""Where rollout engines go on a GPU, checked without one: the GPU share each Ray actor asks for,
one-at-a-time start-up of the workers (local processes and Ray actors), and engines ready before
the trainer's step-0 evaluation. Ray, processes and the training loop's parts are stand-ins that
record what they were asked."""

import queue
import threading
import types

import pytest

from asyncrl.config import Config
from asyncrl.runtime.worker import WorkerSpec, WorkUnit, worker_gpu_share


def _cfg(device="cuda", backend="local", n_workers=2, gpus_per_worker=0.0) -> Config:
    cfg = Config()
    cfg.policy.device, cfg.async_.backend, cfg.async_.n_workers = device, backend, n_workers
    cfg.async_.gpus_per_worker = gpus_per_worker
    return cfg


def _specs(cfg: Config) -> list[WorkerSpec]:
    return [WorkerSpec(worker_id=i, config=cfg.to_dict(), policy_dir="/models/m", seed=i, chunk_tokens=8,
                       interruptible=True) for i in range(cfg.async_.n_workers)]


def test_worker_gpu_share():
    assert worker_gpu_share(_cfg(n_workers=1)) == 0.5  # the actor and the trainer on one GPU
    assert worker_gpu_share(_cfg(n_workers=3)) == 0.25
    assert worker_gpu_share(_cfg(n_workers=3, gpus_per_worker=1.0)) == 1.0
    assert worker_gpu_share(_cfg(device="cpu", n_workers=3, gpus_per_worker=1.0)) == 0.0


def test_gpus_per_worker_must_not_be_negative():
    cfg = _cfg(gpus_per_worker=-0.5)
    with pytest.raises(ValueError, match="^gpus_per_worker: "):
        cfg.async_.validate()


# -- Ray ------------------------------------------------------------------------------------------

class _FakeActorClass:
    """Stands in for ``RolloutActor``: records ``.options(...)`` and the constructor's arguments."""

    def __init__(self):
        self.created: list[dict] = []

    def options(self, **options):
        return types.SimpleNamespace(remote=lambda spec, channel, after=None: self._create(options, spec, after))

    def _create(self, options, spec, after):
        ready_ref = f"ready-{spec.worker_id}"
        self.created.append({"options": options, "spec": spec, "after": after})
        return types.SimpleNamespace(ready=types.SimpleNamespace(remote=lambda: ready_ref))


@pytest.fixture
def ray_backend():
    return pytest.importorskip("asyncrl.runtime.ray.backend")  # Ray is an optional extra


@pytest.fixture
def fake_ray(monkeypatch, ray_backend):
    actors = _FakeActorClass()
    resources = {"CPU": 4.0, "GPU": 1.0}
    monkeypatch.setattr(ray_backend, "RolloutActor", actors)
    monkeypatch.setattr(ray_backend.ray, "cluster_resources", lambda: resources)
    return actors, resources


def test_ray_actors_ask_for_a_gpu_share_on_cuda_and_start_one_after_another(fake_ray, ray_backend):
    actors, _ = fake_ray
    ray_backend.RayPool(_specs(_cfg(backend="ray", n_workers=2)), channel=None, start_timeout_s=1.0)
    assert [a["options"] for a in actors.created] == [{"num_cpus": 1, "num_gpus": pytest.approx(1 / 3)}] * 2
    assert [a["after"] for a in actors.created] == [None, "ready-0"]  # the second waits for the first


def test_ray_actors_on_cpu_ask_for_no_gpu_and_start_together(fake_ray, ray_backend):
    actors, _ = fake_ray
    ray_backend.RayPool(_specs(_cfg(device="cpu", backend="ray", n_workers=2)), channel=None, start_timeout_s=1.0)
    assert [a["options"] for a in actors.created] == [{"num_cpus": 1}] * 2
    assert [a["after"] for a in actors.created] == [None, None]


def test_ray_refuses_more_gpus_than_its_own_cluster_has(fake_ray, ray_backend):
    from asyncrl.core.loader import ConfigError

    actors, resources = fake_ray
    resources["GPU"] = 0.0
    with pytest.raises(ConfigError, match="async.gpus_per_worker"):
        ray_backend.RayPool(_specs(_cfg(backend="ray", n_workers=1)), channel=None, start_timeout_s=1.0,
                            owns_ray=True)
    resources["GPU"] = 1.0
    whole = _specs(_cfg(backend="ray", n_workers=2, gpus_per_worker=1.0))
    with pytest.raises(ConfigError, match="ask for 2 GPUs in all and the Ray cluster has 1"):
        ray_backend.RayPool(whole, channel=None, start_timeout_s=1.0, owns_ray=True)
    ray_backend.RayPool(whole, channel=None, start_timeout_s=1.0)  # a joined cluster may add GPU nodes
    assert len(actors.created) == 2


def test_inside_an_actor_its_gpu_is_cuda(ray_backend):
    spec = _specs(_cfg(backend="ray", n_workers=1))[0]
    spec.config["policy"]["device"] = "cuda:1"
    assert ray_backend.visible_device(spec).config["policy"]["device"] == "cuda"
    assert spec.config["policy"]["device"] == "cuda:1"  # the trainer's copy is left alone
    cpu = _specs(_cfg(device="cpu", backend="ray", n_workers=1))[0]
    assert ray_backend.visible_device(cpu) is cpu


# -- local processes ------------------------------------------------------------------------------


class _FakeContext:
    """``ctx.Process`` records the start order; a started worker reports ready at once."""

    def __init__(self):
        self.started: list[int] = []
        self.queues_given: dict[int, object] = {}

    Queue = queue.Queue
    Event = threading.Event

    def Process(self, target, args, daemon, name):  # multiprocessing's name
        _parent_pid, payload = args  # worker_entry.start_guarded: (parent pid, PickledAtSpawn((target, args)))
        spec, _, work_q, result_q, _ = payload.value[1]
        ctx = self

        class _Process:
            exitcode = None

            def start(self):
                ctx.started.append(spec.worker_id)
                ctx.queues_given[spec.worker_id] = work_q
                result_q.put(("ready", spec.worker_id, None))

            def is_alive(self):
                return True

        return _Process()


def test_local_workers_on_cuda_start_one_at_a_time():
    from asyncrl.runtime.pool import WorkerPool

    ctx = _FakeContext()
    pool = WorkerPool(ctx, _specs(_cfg(n_workers=3)), channel=None, start_timeout_s=5.0)
    assert ctx.started == [0]
    for unit_id in range(3):  # work handed out before a worker starts waits in its queue
        pool.submit(WorkUnit(unit_id, [unit_id], [unit_id], 1))
    assert pool.wait_ready() == []
    assert ctx.started == [0, 1, 2]
    assert ctx.queues_given[2].get_nowait().unit_id == 2


def test_local_workers_on_cpu_start_together():
    from asyncrl.runtime.pool import WorkerPool

    ctx = _FakeContext()
    pool = WorkerPool(ctx, _specs(_cfg(device="cpu", n_workers=3)), channel=None, start_timeout_s=5.0)
    assert ctx.started == [0, 1, 2]
    assert pool.wait_ready() == []


# -- the training loop ----------------------------------------------------------------------------


def _run_loop(monkeypatch, device: str) -> list[str]:
    """``train`` with every part replaced by a recorder, for a run of no steps."""
    from asyncrl.runtime import loop

    events: list[str] = []

    class Recorder:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    class Source(Recorder):
        def wait_ready(self):
            events.append("workers ready")

        def summary(self):
            return {}

    class Evaluations(Recorder):
        seconds = 0.0

        def run(self, step):
            events.append(f"evaluate {step}")
            return 0.0

        def summary(self):
            return {}

    cfg = _cfg(device=device, n_workers=1)
    cfg.run.mode, cfg.trainer.steps = "async", 0

    class Session(Recorder):
        resume, start_step, model, policy_dir = None, 0, None, None
        stop, progress = Recorder(), Recorder()

        def elapsed_s(self):
            return 0.0

        def finish(self, steps, evaluations, extra, train_wall_s=None):
            return {"steps": steps}

    session = Session()
    session.cfg = cfg
    monkeypatch.setattr(loop, "open_session", lambda c: session)
    monkeypatch.setattr(loop, "build_reference", lambda *a: None)
    monkeypatch.setattr(loop, "Learner", lambda *a, **k: types.SimpleNamespace(version=0, close=lambda: None))
    monkeypatch.setattr(loop, "Evaluations", lambda s: Evaluations())
    monkeypatch.setattr(loop, "open_source", lambda c, s: Source())
    assert loop.train(cfg) == {"steps": 0}
    return events


def test_engines_are_ready_before_the_step0_evaluation_on_cuda(monkeypatch):
    assert _run_loop(monkeypatch, "cuda") == ["workers ready", "evaluate 0"]


def test_step0_evaluation_overlaps_the_workers_start_on_cpu(monkeypatch):
    assert _run_loop(monkeypatch, "cpu") == ["evaluate 0", "workers ready"]
