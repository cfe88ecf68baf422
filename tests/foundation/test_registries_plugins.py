"""A plugin module named in run.plugins registers a task, a mode, a backend, an engine and a weight
channel at import; config accepts each name with no other edit, the runtime resolves each entry,
and an unknown name is still one line naming the key and the names known."""

import subprocess
import sys
import textwrap

import pytest

from asyncrl.core import registries
from asyncrl.config import Config, ConfigError, load_config
from asyncrl.config.help import config_keys
from asyncrl.core.loader import from_dict
from asyncrl.tasks import TASKS

PLUGIN = "asyncrl_test_plugin_parts"
PLUGIN_SOURCE = textwrap.dedent('''
    from dataclasses import dataclass

    from asyncrl.core.registries import BACKENDS, CHANNELS, ENGINES, MODES, EngineEntry
    from asyncrl.tasks import TASKS, Problem, extract_answer


    @dataclass(frozen=True)
    class CountSettings:
        path: str | None = None
        n: int = 4


    class CountTask:
        name = "count_plugin"

        @staticmethod
        def config_from(section):
            return CountSettings(path=section.path, n=5)

        def __init__(self, cfg=None):
            self.cfg = cfg or CountSettings()

        def problems(self, split):
            return [Problem(f"{split}-{i}", f"Q: {i}?\\nA:", str(i), f" #### {i}") for i in range(self.cfg.n)]

        def reward(self, completion, problem):
            return float(extract_answer(completion) == problem.answer)


    def replay_source(cfg, session):
        return ("replay", cfg.run.mode)


    def inline_pool(cfg, specs, model):
        return ("pool", "channel")


    class NullChannel:
        version = -1

        def publish(self, model, version):
            self.version = version


    def open_null(model, **_):
        return NullChannel()


    def build_echo(spec, *, model, tokenizer, policy_dir, engine_kwargs):
        return ("echo", engine_kwargs)


    TASKS["count_plugin"] = CountTask
    MODES["replay_plugin"] = f"{__name__}:replay_source"
    BACKENDS["inline_plugin"] = f"{__name__}:inline_pool"
    CHANNELS["null_plugin"] = f"{__name__}:open_null"
    ENGINES["echo_plugin"] = EngineEntry(f"{__name__}:build_echo", owns_weights=False)
''')
PLUGIN_NAMES = {"task.name": "count_plugin", "run.mode": "replay_plugin", "async.backend": "inline_plugin",
                "async.weight_channel": "null_plugin", "rollout.engine": "echo_plugin"}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The plugin's directory on sys.path; afterwards the registries and sys.modules as before,
    so no other test sees the plugin's names."""
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = [(table, dict(table)) for table in (TASKS, registries.MODES, registries.BACKENDS,
                                                 registries.CHANNELS, registries.ENGINES)]
    yield tmp_path
    for table, before in saved:
        table.clear()
        table.update(before)
    sys.modules.pop(PLUGIN, None)


def _forget_plugin():
    """As in a fresh process (a rollout worker): the registries as built in, the plugin not imported."""
    for table in (TASKS, registries.MODES, registries.BACKENDS, registries.CHANNELS, registries.ENGINES):
        for name in list(table):
            if name.endswith("_plugin"):
                del table[name]
    sys.modules.pop(PLUGIN, None)


def _plugin_overrides() -> list[str]:
    return [f"run.plugins=[{PLUGIN}]", *(f"{key}={name}" for key, name in PLUGIN_NAMES.items())]


def test_config_accepts_every_name_a_plugin_registers(plugin_dir):
    cfg = load_config(None, _plugin_overrides())
    assert (cfg.task.name, cfg.run.mode, cfg.async_.backend, cfg.async_.weight_channel, cfg.rollout.engine) == \
        tuple(PLUGIN_NAMES.values())
    plugin = sys.modules[PLUGIN]
    # the runtime resolves each entry's import path to the plugin's object
    assert registries.resolve(registries.MODES["replay_plugin"]) is plugin.replay_source
    assert registries.resolve(registries.BACKENDS["inline_plugin"]) is plugin.inline_pool
    assert registries.resolve(registries.CHANNELS["null_plugin"]) is plugin.open_null
    assert TASKS["count_plugin"] is plugin.CountTask


def test_the_runtime_builds_the_plugins_parts(plugin_dir):
    from asyncrl.rollout.base import EngineSpec
    from asyncrl.rollout.engine import make_engine
    from asyncrl.runtime.channels import open_channel
    from asyncrl.runtime.sources import open_source

    cfg = load_config(None, [*_plugin_overrides(), "rollout.engine_kwargs={depth: 2}"])
    task = cfg.task.build()  # the task's own settings: config_from gives n=5
    assert [p.answer for p in task.problems("eval")] == ["0", "1", "2", "3", "4"]
    assert task.reward(" #### 3", task.problems("train")[3]) == 1.0
    assert open_source(cfg, session=None) == ("replay", "replay_plugin")
    engine = make_engine(cfg.rollout.engine, EngineSpec(max_new_tokens=1, temperature=1.0), tokenizer=None,
                         engine_kwargs=cfg.rollout.engine_kwargs)
    assert engine == ("echo", {"depth": 2})
    assert open_channel("null_plugin", model=None).version == 0  # opened, then version 0 published


def test_every_process_imports_the_plugins_before_checking_names(plugin_dir):
    saved = load_config(None, _plugin_overrides()).to_dict()  # what a worker receives
    _forget_plugin()
    with pytest.raises(ConfigError, match="run.mode: must be one of sync, async, simulated; got 'replay_plugin'"):
        load_config(None, ["run.mode=replay_plugin"])
    rebuilt = from_dict(Config, saved)  # as a rollout worker builds its config
    assert rebuilt.run.mode == "replay_plugin" and PLUGIN in sys.modules


@pytest.mark.parametrize("key", sorted(PLUGIN_NAMES))
def test_an_unknown_name_is_one_line_naming_the_key_and_the_known_names(plugin_dir, key):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"run.plugins=[{PLUGIN}]", f"{key}=no_such_part"])
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: {key}: must be one of ")
    assert text.endswith("; got 'no_such_part'") and PLUGIN_NAMES[key] in text  # the plugin's name is known


def test_help_lists_the_plugins_names(plugin_dir):
    before = {k.key: k.type for k in config_keys()}
    assert before["async.backend"] == "local|ray" and before["task.name"] == "auto|arithmetic|gsm8k|math|dataset"
    load_config(None, [f"run.plugins=[{PLUGIN}]"])
    after = {k.key: k.type for k in config_keys()}
    assert after["async.backend"] == "local|ray|inline_plugin"
    assert after["async.weight_channel"] == "auto|shm|cuda|ray|collective|null_plugin"


def test_a_plugin_that_does_not_import_is_one_line(plugin_dir):
    (plugin_dir / "broken_plugin_mod.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"^config error: run.plugins\[1\]: cannot import 'broken_plugin_mod': "
                                          r"RuntimeError: boom$"):
        load_config(None, [f"run.plugins=[{PLUGIN}, broken_plugin_mod]"])
    with pytest.raises(ConfigError, match=r"run.plugins\[0\]: cannot import 'nowhere_mod'.*on PYTHONPATH"):
        load_config(None, ["run.plugins=[nowhere_mod]"])
    sys.modules.pop("broken_plugin_mod", None)


def test_config_checks_names_without_importing_the_runtime():
    code = ("import sys; from asyncrl.config import load_config; load_config(None, ['run.mode=sync']); "
            "print(sorted(m for m in sys.modules if m.startswith(('asyncrl.runtime', 'asyncrl.rollout'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"
