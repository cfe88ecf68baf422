"""The two central extension points are protocols (asyncrl.runtime.sources.BatchSource,
asyncrl.agents.env.Environment), and every built-in part meets its protocol: each member is there
and each method takes the protocol's parameters, so that a method removed or renamed fails here
before a run does."""

import inspect
import typing

import pytest

from asyncrl.agents.env import Environment
from asyncrl.core.registries import MODES, resolve
from asyncrl.runtime.sources import BatchSource

# the built-in environments' classes (gem:<game> builds a GemEnv; env.factory a TrlEnvironment)
BUILT_IN_ENVIRONMENTS = ("asyncrl.agents.envs:FinalAnswer", "asyncrl.envs.guess:GuessNumber",
                         "asyncrl.envs.gem:GemEnv", "asyncrl.envs.reasoning_gym:RetryEnv",
                         "asyncrl.agents.latency:Latency", "asyncrl.envs.trl:TrlEnvironment")


def _members(protocol: type) -> list[str]:
    attrs = getattr(protocol, "__protocol_attrs__", None)  # Python 3.12 on
    return sorted(attrs if attrs is not None else typing._get_protocol_attrs(protocol))  # what isinstance checks


def _parameters(fn) -> list[tuple[str, inspect._ParameterKind]]:
    """(name, kind) of each parameter but ``self``."""
    return [(p.name, p.kind) for p in list(inspect.signature(fn).parameters.values())[1:]]


def missing_or_unlike(cls: type, protocol: type) -> list[str]:
    """What ``cls`` lacks of ``protocol``: a member it does not have, or a method whose parameters
    differ from the protocol's (a property or a class attribute stands for a property)."""
    wrong = []
    for name in _members(protocol):
        expected, actual = getattr(protocol, name), getattr(cls, name, None)
        if actual is None:
            wrong.append(f"{name}: missing")
        elif callable(expected) and not isinstance(expected, property):
            if not callable(actual):
                wrong.append(f"{name}: not a method")
            elif _parameters(actual) != _parameters(expected):
                wrong.append(f"{name}: takes {_parameters(actual)}, the protocol {_parameters(expected)}")
    return wrong


def _source_class(target) -> type:
    """The class a ``MODES`` entry builds: the entry itself, or its factory's return type."""
    return target if isinstance(target, type) else typing.get_type_hints(target)["return"]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_each_built_in_batch_source_is_a_batch_source(mode):
    cls = _source_class(resolve(MODES[mode].target))
    assert missing_or_unlike(cls, BatchSource) == [], cls


def test_the_protocols_name_what_the_loop_calls():
    assert set(_members(BatchSource)) >= {"next_batch", "publish", "observe", "step_metrics", "state_dict",
                                          "take_dropped_groups", "wait_ready", "summary", "n_generators",
                                          "__enter__", "__exit__"}
    assert set(_members(Environment)) == {"reset", "step"}


@pytest.mark.parametrize("path", BUILT_IN_ENVIRONMENTS)
def test_each_built_in_environment_is_an_environment(path):
    cls = resolve(path)
    assert missing_or_unlike(cls, Environment) == [], cls
    assert issubclass(cls, Environment)


def test_a_part_without_a_method_fails_its_protocol():
    class NoPublish:
        n_generators = 1

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

        def wait_ready(self):
            pass

        def next_batch(self, version, step):
            pass

        def observe(self, stats, wait_frac):
            pass

        def step_metrics(self):
            return {}

        def take_dropped_groups(self):
            return []

        def state_dict(self):
            return {}

        def summary(self):
            return {}

    class StepsWithoutAction:
        def reset(self, row):
            return ""

        def step(self):
            return "", 0.0, True, {}

    assert missing_or_unlike(NoPublish, BatchSource) == ["publish: missing"]
    assert not isinstance(NoPublish(), BatchSource)
    NoPublish.publish = lambda self, model, version: None
    assert missing_or_unlike(NoPublish, BatchSource) == [] and isinstance(NoPublish(), BatchSource)
    assert missing_or_unlike(StepsWithoutAction, Environment) == [
        "step: takes [], the protocol [('action', <_ParameterKind.POSITIONAL_OR_KEYWORD: 1>)]"]
