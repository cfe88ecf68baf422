"""The Ray pool's bookkeeping when its actors stream episodes, checked without a Ray cluster: the
actors, their references and ``ray.wait``/``ray.get`` are stand-ins that record what they were asked
(the run on a cluster: tests/agents/test_scheduler_e2e.py, slow)."""

import types

import pytest

from asyncrl.core.errors import as_payload
from asyncrl.core.loader import ConfigError
from asyncrl.runtime.worker import WorkerSpec, WorkUnit

ray_backend = pytest.importorskip("asyncrl.runtime.ray.backend")  # Ray is an optional extra
ray = ray_backend.ray


class Ref:
    """A stand-in object reference: finished once ``value`` or ``error`` is set."""

    def __init__(self, value=None, done=True):
        self.value, self.error, self.done = value, None, done

    def finish(self, value=None, error=None):
        self.value, self.error, self.done = value, error, True


class Actor:
    def __init__(self):
        self.added: list[WorkUnit] = []
        self.taking: list[Ref] = []  # every take call's reference, in order
        self.add = types.SimpleNamespace(remote=lambda unit: self.added.append(unit) or Ref())
        self.take = types.SimpleNamespace(remote=self._take)
        self.run = types.SimpleNamespace(remote=lambda unit: Ref(done=False))
        self.ready = types.SimpleNamespace(remote=lambda: Ref(True))
        self.stop = types.SimpleNamespace(remote=lambda: Ref())

    def _take(self, timeout_s):
        self.taking.append(Ref(done=False))
        return self.taking[-1]


def _wait(refs, num_returns=1, timeout=None):
    done = [r for r in refs if r.done][:num_returns]
    return done, [r for r in refs if r not in done]


def _get(ref, timeout=None):
    if isinstance(ref, list):
        return [_get(r) for r in ref]
    if ref.error is not None:
        raise ref.error
    return ref.value


@pytest.fixture
def pool(monkeypatch):
    """A RayPool of one worker whose rollout plays episodes, on stand-ins."""
    made = []

    def new_actor(spec, channel, after=None):
        made.append(Actor())
        return made[-1]

    monkeypatch.setattr(ray_backend, "RolloutActor", types.SimpleNamespace(
        options=lambda **options: types.SimpleNamespace(remote=new_actor)))
    monkeypatch.setattr(ray_backend, "actor_options", lambda spec: {"num_cpus": 1})
    monkeypatch.setattr(ray_backend, "_config_of", lambda spec: types.SimpleNamespace(
        env=types.SimpleNamespace(episodes=True)))
    monkeypatch.setattr(ray, "wait", _wait)
    monkeypatch.setattr(ray, "get", _get)
    spec = WorkerSpec(worker_id=0, config={"policy": {"device": "cpu"}}, policy_dir="/m", seed=0, chunk_tokens=8,
                      interruptible=True)
    pool = ray_backend.RayPool([spec], channel=None, start_timeout_s=1.0)
    pool.made = made
    return pool


def _payload(unit_id: int, group: int) -> dict:
    return {"unit_id": unit_id, "delivered": [group], "batch": f"batch of group {group}", "n": 2}


def test_groups_stream_through_one_outstanding_take(pool):
    actor = pool.made[0]
    pool.submit(WorkUnit(0, [10, 11], [0, 1], 2))
    pool.submit(WorkUnit(1, [12, 13], [2, 3], 2))
    assert [u.unit_id for u in actor.added] == [0, 1] and len(actor.taking) == 1  # one take for both
    assert pool.poll(0.0) == [] and len(actor.taking) == 1
    actor.taking[0].finish([_payload(0, 1), _payload(1, 3)])
    assert pool.poll(0.0) == [("result", 0, _payload(0, 1)), ("result", 0, _payload(1, 3))]
    # the groups still playing stay in flight (a checkpoint re-issues them), and the next take is out
    assert pool.inflight_units() == [WorkUnit(0, [10], [0], 2), WorkUnit(1, [12], [2], 2)]
    assert pool.n_inflight == 2 and len(actor.taking) == 2
    actor.taking[1].finish([_payload(0, 0), _payload(0, 0)])  # the second is no longer in flight: dropped
    assert pool.poll(0.0) == [("result", 0, _payload(0, 0))]
    actor.taking[2].finish([_payload(1, 2)])
    assert [m[2]["delivered"] for m in pool.poll(0.0)] == [[2]]
    assert pool.inflight_units() == [] and len(actor.taking) == 3  # nothing in flight: no take asked for
    pool.submit(WorkUnit(2, [14], [4], 2))
    assert len(actor.taking) == 4


def test_an_actor_whose_take_fails_is_dead_holding_its_units(pool, capsys):
    actor = pool.made[0]
    pool.submit(WorkUnit(0, [10, 11], [0, 1], 2))
    pool.submit(WorkUnit(1, [12], [2], 2))
    actor.taking[0].finish([_payload(0, 1)])
    pool.poll(0.0)
    assert pool.restart_dead() == []  # alive: its next take has not answered
    actor.taking[1].finish(error=ray.exceptions.ActorDiedError())
    assert pool.poll(0.0) == []  # restart_dead reports it
    assert pool.restart_dead() == [WorkUnit(0, [10], [0], 2), WorkUnit(1, [12], [2], 2)]
    assert "rollout worker 0 died (Ray: ActorDiedError); restarting it (restart 1); 2 work unit(s) lost" \
        in capsys.readouterr().err
    assert len(pool.made) == 2 and pool.actors[0] is pool.made[1] and pool.n_inflight == 0
    assert pool.takes == {} and pool.restart_dead() == []
    pool.submit(WorkUnit(2, [14], [4], 2))  # the new actor gets the next unit, and a take of its own
    assert [u.unit_id for u in pool.made[1].added] == [2] and len(pool.made[1].taking) == 1


def test_an_actors_config_error_reaches_the_trainer_as_its_class(pool):
    """The actor raises a ConfigError as data (ActorFatal): its class and one line come back."""
    from asyncrl.agents.env import EnvError

    actor = pool.made[0]
    pool.submit(WorkUnit(0, [10], [0], 2))
    error = EnvError(object, None, "26 of the last 26 episodes failed")
    actor.taking[0].finish(error=ray_backend.ActorFatal(as_payload(error)))
    with pytest.raises(EnvError) as raised:
        pool.poll(0.0)
    assert str(raised.value) == str(error) and isinstance(raised.value, ConfigError)
