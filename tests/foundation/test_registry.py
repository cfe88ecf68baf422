"""asyncrl.core.registry.Registry: the one registry shape. Its lookup error (one line: the key, the
bad value, close matches, the known names), prefix families, plugins adding entries, and every
registry of asyncrl being one."""

import importlib
import pickle

import pytest

from asyncrl.core.registry import Registry, close_hint, refusal


def _colours() -> Registry:
    return Registry("paint.colour", {"red": 1, "green": 2, "blue": 3})


def test_it_is_a_dict_to_the_code_that_fills_it():
    reg = _colours()
    reg["cyan"] = 4  # a plugin's line
    assert isinstance(reg, dict) and "cyan" in reg and reg["cyan"] == 4 and list(reg) == ["red", "green", "blue", "cyan"]
    assert reg.get("nope") is None and reg.get("nope", 0) == 0 and "nope" not in reg
    assert [] not in reg  # an unhashable value (a list out of YAML) is no name, not a TypeError
    with pytest.raises(KeyError):
        reg["nope"]


def test_lookup_error_is_one_line_naming_the_key_the_value_close_matches_and_known_names():
    reg = _colours()
    assert reg.lookup("green") == 2
    with pytest.raises(ValueError) as err:
        reg.lookup("gren")
    assert str(err.value) == "paint.colour: must be one of red, green, blue; got 'gren' (did you mean 'green'?)"
    with pytest.raises(ValueError) as err:
        reg.lookup("purple")
    assert str(err.value) == "paint.colour: must be one of red, green, blue; got 'purple'"  # nothing close
    with pytest.raises(ValueError, match=r"got \['red'\]"):
        reg.lookup(["red"])


def test_why_not_takes_the_words_a_key_accepts_besides_the_entries():
    reg = _colours()
    assert reg.why_not("red") is None and reg.why_not("auto", ("auto",)) is None
    assert reg.why_not("aut", ("auto",)) == "must be one of auto, red, green, blue; got 'aut' (did you mean 'auto'?)"


def test_close_hint_and_refusal():
    assert close_hint("blu", ["blue", "red"]) == " (did you mean 'blue'?)"
    assert close_hint("xyz", ["blue"]) == "" and close_hint(3, ["blue"]) == ""
    assert refusal("x", ["a", "b"]) == "must be one of a, b; got 'x'"


def _shade(name: str) -> str:
    if name == "bad":
        raise ValueError(f"dark:{name} cannot be mixed here")
    return f"shade of {name}"


def test_prefix_family_resolves_the_part_after_the_prefix():
    reg = Registry("paint.colour", {"red": 1}, families={"dark:": _shade})
    assert "dark:red" in reg and reg["dark:red"] == "shade of red" and reg.get("dark:x") == "shade of x"
    assert reg.lookup("dark:blue") == "shade of blue"
    assert reg.names() == ["red", "dark:<id>"] and list(reg) == ["red"]  # iteration sees what it holds
    assert reg.why_not("dark:bad") == "dark:bad cannot be mixed here"  # the family's own refusal
    with pytest.raises(ValueError, match=r"^paint.colour: dark:bad cannot be mixed here$"):
        reg.lookup("dark:bad")
    with pytest.raises(ValueError, match=r"must be one of red, dark:<id>; got 'light:red'"):
        reg.lookup("light:red")


def test_family_by_import_path_is_imported_only_when_asked():
    reg = Registry("paint.colour", families={"path:": "os.path:basename"})
    reg.family("upper:", str.upper)
    assert reg["path:/a/b"] == "b" and reg["upper:ab"] == "AB"


def test_register_decorator_and_a_copy_keeps_the_label_and_families():
    reg = Registry("paint.colour", families={"upper:": str.upper})

    @reg.register("mine")
    def mine():
        return "mixed"

    assert reg["mine"] is mine and mine() == "mixed"
    copy = pickle.loads(pickle.dumps(Registry("k", {"plain": 1}, families={"p:": "os.path:basename"})))
    assert isinstance(copy, Registry) and copy.kind == "k" and copy["plain"] == 1 and copy["p:/x"] == "x"


def test_a_plugin_entry_is_seen_by_the_config_check():
    from asyncrl.core.loader import ConfigError
    from asyncrl.core.registries import MODES, ModeEntry
    from asyncrl.runtime.validate import load_run_config

    with pytest.raises(ConfigError, match=r"run.mode: must be one of sync, async, simulated; got 'replay_reg'"):
        load_run_config(None, ["run.mode=replay_reg"])
    MODES["replay_reg"] = ModeEntry("asyncrl.runtime.sources.lockstep:sync_source")
    try:
        assert load_run_config(None, ["run.mode=replay_reg"]).run.mode == "replay_reg"
    finally:
        del MODES["replay_reg"]


def test_config_errors_name_close_matches():
    from asyncrl.core.loader import ConfigError
    from asyncrl.runtime.validate import load_run_config

    with pytest.raises(ConfigError, match=r"^config error: loss.name: must be one of ppo, .*; got 'ppx' "
                                          r"\(did you mean 'ppo'\?\)$"):
        load_run_config(None, ["loss.name=ppx"])
    with pytest.raises(ConfigError, match=r"async.weight_channel: must be one of auto, .*\(did you mean 'shm'\?\)"):
        load_run_config(None, ["async.weight_channel=shmm"])


# every registry of asyncrl (and of the repository's benchmark apparatus): a new one that is a plain
# dict fails here
REGISTRIES = [
    "asyncrl.core.registries:MODES", "asyncrl.core.registries:BACKENDS", "asyncrl.core.registries:CHANNELS",
    "asyncrl.core.registries:ENGINES", "asyncrl.tasks:TASKS", "asyncrl.objectives.registry:LOSSES",
    "asyncrl.objectives.prox:PROX_STRATEGIES", "asyncrl.tracking:TRACKERS", "asyncrl.agents:ENVIRONMENTS",
    "asyncrl.agents.toolset:TOOLS", "asyncrl.agents.tool_formats:FORMATS", "asyncrl.training.reference:KL_ESTIMATORS",
    "asyncrl.training.lr_schedule:SHAPES", "benchmarks.bench.suites:SUITES",
]


def test_every_registry_is_a_registry():
    kinds = {}
    for path in REGISTRIES:
        module, _, attr = path.partition(":")
        registry = getattr(importlib.import_module(module), attr)
        assert isinstance(registry, Registry), f"{path} is a {type(registry).__name__}, not a Registry"
        assert registry and registry.kind, path
        kinds[path] = registry.kind
    assert len(set(kinds.values())) == len(kinds), kinds  # each labelled with its own key
