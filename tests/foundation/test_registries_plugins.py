"""A plugin module named in run.plugins registers a task, a mode, a backend, an engine, a weight
channel, a loss and a tracker at import (a bench suite: tests/bench/test_suite_plugins.py); config
accepts each name with no other edit, asks each entry what it works with, the runtime resolves each
entry, and an unknown name is still one line naming the key and the names known."""

import subprocess
import sys
import textwrap

import pytest

from asyncrl.core import registries
from asyncrl.config import Config, ConfigError
from asyncrl.config.help import config_keys
from asyncrl.core.loader import from_dict
from asyncrl.runtime.validate import load_run_config, validate_run
from asyncrl.objectives import LOSSES
from asyncrl.tasks import TASKS, configured_task
from asyncrl.tracking import TRACKERS

PLUGIN = "asyncrl_test_plugin_parts"
PLUGIN_SOURCE = textwrap.dedent('''
    from dataclasses import dataclass

    import torch

    from asyncrl.core.registries import (BACKENDS, CHANNELS, ENGINES, MODES, RAY, BackendEntry, ChannelEntry,
                                         EngineEntry, ModeEntry)
    from asyncrl.objectives import LOSSES, PROX_REQUIRED, LossEntry
    from asyncrl.objectives.ppo import PPOParams, ppo_loss
    from asyncrl.tasks import TASKS, Problem, extract_answer
    from asyncrl.tracking import TRACKERS, TrackerEntry


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


    LOSS_CALLS = []  # one entry per call of the plugin's loss, in the trainer's process


    def marked_loss(inp, params):
        """PPO's clipped loss, plus a statistic of its own that the run's metrics must show."""
        LOSS_CALLS.append(int(inp.valid.sum()))
        loss, stats = ppo_loss(inp, params)
        return loss, {**stats, "plugin_marker": torch.tensor(7.0)}


    TRACKED = []  # (step, scalars) as the plugin's tracker received them


    class ListTracker:
        def __init__(self, run_dir):
            self.run_dir, self.closed = run_dir, False

        def log_scalars(self, step, scalars):
            TRACKED.append((step, dict(scalars)))

        def log_histogram(self, step, name, counts):
            pass

        def log_table(self, step, name, columns, rows):
            pass

        def flush(self):
            pass

        def close(self):
            self.closed = True


    def open_list_tracker(run_dir, cfg, after_step):
        return ListTracker(run_dir)


    TASKS["count_plugin"] = CountTask
    MODES["replay_plugin"] = ModeEntry(f"{__name__}:replay_source")
    MODES["window_plugin"] = ModeEntry(f"{__name__}:replay_source", window=True)
    BACKENDS["inline_plugin"] = BackendEntry(f"{__name__}:inline_pool")
    BACKENDS["cluster_plugin"] = BackendEntry(f"{__name__}:inline_pool", provides=frozenset({RAY}), auto_channels=())
    CHANNELS["null_plugin"] = ChannelEntry(f"{__name__}:open_null")
    CHANNELS["raystore_plugin"] = ChannelEntry(f"{__name__}:open_null", needs=frozenset({RAY}))
    ENGINES["echo_plugin"] = EngineEntry(f"{__name__}:build_echo", owns_weights=False)
    ENGINES["gpu_echo_plugin"] = EngineEntry(f"{__name__}:build_echo", owns_weights=False, devices=frozenset({"cuda"}))
    LOSSES["marked_plugin"] = LossEntry(marked_loss, PPOParams, micro_batch_exact=True)
    LOSSES["whole_plugin"] = LossEntry(marked_loss, PPOParams, reads_prox=PROX_REQUIRED, natural_prox="loglinear")
    TRACKERS["list_plugin"] = TrackerEntry(f"{__name__}:open_list_tracker")
''')
PLUGIN_NAMES = {"task.name": "count_plugin", "run.mode": "replay_plugin", "async.backend": "inline_plugin",
                "async.weight_channel": "null_plugin", "rollout.engine": "echo_plugin", "loss.name": "marked_plugin"}
# every registry a plugin may add to (a fixture restores each)
TABLES = (TASKS, registries.MODES, registries.BACKENDS, registries.CHANNELS, registries.ENGINES, LOSSES, TRACKERS)


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """The plugin's directory on sys.path; afterwards the registries and sys.modules as before,
    so no other test sees the plugin's names."""
    (tmp_path / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    saved = [(table, dict(table)) for table in TABLES]
    yield tmp_path
    for table, before in saved:
        table.clear()
        table.update(before)
    sys.modules.pop(PLUGIN, None)


def _forget_plugin():
    """As in a fresh process (a rollout worker): the registries as built in, the plugin not imported."""
    for table in TABLES:
        for name in list(table):
            if name.endswith("_plugin"):
                del table[name]
    sys.modules.pop(PLUGIN, None)


def _plugin_overrides() -> list[str]:
    return [f"run.plugins=[{PLUGIN}]", *(f"{key}={name}" for key, name in PLUGIN_NAMES.items())]


def test_config_accepts_every_name_a_plugin_registers(plugin_dir):
    cfg = load_run_config(None, _plugin_overrides())
    assert (cfg.task.name, cfg.run.mode, cfg.async_.backend, cfg.async_.weight_channel, cfg.rollout.engine,
            cfg.loss.name) == tuple(PLUGIN_NAMES.values())
    plugin = sys.modules[PLUGIN]
    # the runtime resolves each entry's import path to the plugin's object
    assert registries.resolve(registries.MODES["replay_plugin"].target) is plugin.replay_source
    assert registries.resolve(registries.BACKENDS["inline_plugin"].target) is plugin.inline_pool
    assert registries.resolve(registries.CHANNELS["null_plugin"].target) is plugin.open_null
    assert registries.resolve(TRACKERS["list_plugin"].target) is plugin.open_list_tracker
    assert TASKS["count_plugin"] is plugin.CountTask and LOSSES["marked_plugin"].fn is plugin.marked_loss


def test_the_runtime_builds_the_plugins_parts(plugin_dir):
    from asyncrl.rollout.base import EngineSpec
    from asyncrl.rollout.engine import make_engine
    from asyncrl.runtime.channels import open_channel
    from asyncrl.runtime.sources import open_source

    cfg = load_run_config(None, [*_plugin_overrides(), "rollout.engine_kwargs={depth: 2}"])
    task = configured_task(cfg.task)  # the task's own settings: config_from gives n=5
    assert [p.answer for p in task.problems("eval")] == ["0", "1", "2", "3", "4"]
    assert task.reward(" #### 3", task.problems("train")[3]) == 1.0
    assert open_source(cfg, session=None) == ("replay", "replay_plugin")
    engine = make_engine(cfg.rollout.engine, EngineSpec(max_new_tokens=1, temperature=1.0), tokenizer=None,
                         engine_kwargs=cfg.rollout.engine_kwargs)
    assert engine == ("echo", {"depth": 2})
    assert open_channel("null_plugin", model=None).version == 0  # opened, then version 0 published


def test_every_process_imports_the_plugins_before_checking_names(plugin_dir):
    saved = load_run_config(None, _plugin_overrides()).to_dict()  # what a worker receives
    _forget_plugin()
    with pytest.raises(ConfigError, match="run.mode: must be one of sync, async, simulated; got 'replay_plugin'"):
        load_run_config(None, ["run.mode=replay_plugin"])
    rebuilt = validate_run(from_dict(Config, saved))  # as a rollout worker builds its config
    assert rebuilt.run.mode == "replay_plugin" and PLUGIN in sys.modules


@pytest.mark.parametrize("key", sorted(PLUGIN_NAMES))
def test_an_unknown_name_is_one_line_naming_the_key_and_the_known_names(plugin_dir, key):
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"run.plugins=[{PLUGIN}]", f"{key}=no_such_part"])
    text = str(err.value)
    assert "\n" not in text and text.startswith(f"config error: {key}: must be one of ")
    assert text.endswith("; got 'no_such_part'") and PLUGIN_NAMES[key] in text  # the plugin's name is known


def test_help_lists_the_plugins_names(plugin_dir):
    before = {k.key: k.type for k in config_keys()}
    assert before["async.backend"] == "local|ray"
    assert before["task.name"] == "auto|arithmetic|gsm8k|math|dataset|calculator|guess|gem|guess_tail|reasoning_gym"
    load_run_config(None, [f"run.plugins=[{PLUGIN}]"])
    after = {k.key: k.type for k in config_keys()}
    assert after["async.backend"] == "local|ray|inline_plugin|cluster_plugin"
    assert after["async.weight_channel"] == "auto|shm|cuda|ray|collective|null_plugin|raystore_plugin"
    assert after["loss.name"].endswith("|a3po_seq|vespo|dppo|dppo_kl|sapo|marked_plugin|whole_plugin")


def test_a_plugin_that_does_not_import_is_one_line(plugin_dir):
    (plugin_dir / "broken_plugin_mod.py").write_text("raise RuntimeError('boom')\n")
    with pytest.raises(ConfigError, match=r"^config error: run.plugins\[1\]: cannot import 'broken_plugin_mod': "
                                          r"RuntimeError: boom$"):
        load_run_config(None, [f"run.plugins=[{PLUGIN}, broken_plugin_mod]"])
    with pytest.raises(ConfigError, match=r"run.plugins\[0\]: cannot import 'nowhere_mod'.*on PYTHONPATH"):
        load_run_config(None, ["run.plugins=[nowhere_mod]"])
    sys.modules.pop("broken_plugin_mod", None)


def test_the_name_checks_load_no_loop_engine_or_worker():
    code = ("import sys; from asyncrl.runtime.validate import load_run_config; "
            "load_run_config(None, ['run.mode=sync']); "
            "print(sorted(m for m in sys.modules if m.startswith(('asyncrl.runtime', 'asyncrl.rollout'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    # the name checks are asyncrl.runtime.validate's, which loads no loop, engine or worker
    assert out.stdout.strip() == "['asyncrl.runtime', 'asyncrl.runtime.validate']"


def _refusal(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as err:
        load_run_config(None, [f"run.plugins=[{PLUGIN}]", *overrides])
    assert "\n" not in str(err.value)
    return str(err.value)


def test_config_asks_each_entry_what_it_works_with(plugin_dir):
    """No part is named by config: a plugin's channel, backend, engine and mode are accepted or
    refused by what their entries declare, in one line naming the key."""
    assert "async.weight_channel: 'raystore_plugin' does not work with async.backend='local' (it needs Ray actors" \
        in _refusal(["async.weight_channel=raystore_plugin"])
    load_run_config(None, [f"run.plugins=[{PLUGIN}]", "async.backend=cluster_plugin",
                       "async.weight_channel=raystore_plugin"])
    load_run_config(None, [f"run.plugins=[{PLUGIN}]", "async.backend=ray", "async.weight_channel=null_plugin"])
    assert "async.weight_channel: auto finds no channel for async.backend='cluster_plugin'" \
        in _refusal(["async.backend=cluster_plugin"])
    assert "rollout.engine: 'gpu_echo_plugin' runs on policy.device=cuda only, got 'cpu'" \
        in _refusal(["rollout.engine=gpu_echo_plugin"])
    assert "policy.lm_head_fp32: not supported with rollout.engine=echo_plugin (engines that support it: " \
           "transformers)" in _refusal(["rollout.engine=echo_plugin", "policy.lm_head_fp32=true"])
    load_run_config(None, [f"run.plugins=[{PLUGIN}]", "run.mode=window_plugin", "async.adaptive.enabled=true"])
    assert "async.adaptive: adapts the async look-ahead window; run.mode='replay_plugin' has none" \
        in _refusal(["run.mode=replay_plugin", "async.adaptive.enabled=true"])


def test_a_plugins_loss_declares_its_micro_batching_and_its_proximal_policy(plugin_dir):
    from asyncrl.objectives import LOSS_PARAMS, loss_param_names, natural_prox

    load_run_config(None, [f"run.plugins=[{PLUGIN}]", "loss.name=marked_plugin", "trainer.micro_batch_size=2"])
    message = _refusal(["loss.name=whole_plugin", "trainer.micro_batch_size=2"])
    assert message.startswith("config error: trainer.micro_batch_size: loss 'whole_plugin' is not split exactly")
    assert "marked_plugin" in message.split("one of ")[1]  # the exact losses listed, the plugin's among them
    assert "trainer.prox: 'none' does not go with loss.name='whole_plugin'" \
        in _refusal(["loss.name=whole_plugin", "trainer.prox=none"])
    assert natural_prox("whole_plugin") == "loglinear"
    assert LOSS_PARAMS["marked_plugin"] == loss_param_names("marked_plugin") == loss_param_names("ppo")
    assert "params.bogus: not a parameter of loss 'marked_plugin'" \
        in _refusal(["loss.name=marked_plugin", "loss.params.bogus=1"])


def _short_run(tmp_path, model_dir, *overrides: str) -> list[dict]:
    """Two sync steps of the tiny policy in this process; the rows of metrics.jsonl."""
    import json

    from asyncrl.runtime import train

    cfg = load_run_config(None, [
        f"run.plugins=[{PLUGIN}]", f"policy.model_path={model_dir}", "run.mode=sync", "run.name=r",
        f"run.out_dir={tmp_path / 'runs'}", "run.progress=false", "run.report=false", "run.report_to=[]",
        "run.log_completions_every=0", "trainer.steps=2", "trainer.n_minibatches=1", "rollout.prompts_per_step=2",
        "rollout.samples_per_prompt=2", "rollout.max_new_tokens=4", "eval.every=0", "eval.n_problems=2",
        "eval.samples=1", *overrides])
    train(cfg)
    lines = (tmp_path / "runs" / "r" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_a_short_run_trains_with_the_plugins_loss(plugin_dir, model_dir):
    rows = _short_run(plugin_dir, model_dir, "loss.name=marked_plugin")
    plugin = sys.modules[PLUGIN]
    assert len(plugin.LOSS_CALLS) == 2 and all(n > 0 for n in plugin.LOSS_CALLS)  # one minibatch per step
    trained = [row for row in rows if row["step"] > 0]
    assert [row["step"] for row in trained] == [1, 2]
    assert all(row["plugin_marker"] == 7.0 for row in trained)  # the loss's own statistic reaches the metrics


def test_a_short_run_reports_to_the_plugins_tracker(plugin_dir, model_dir):
    _short_run(plugin_dir, model_dir, "loss.name=ppo", "run.report_to=[list_plugin]")
    tracked = sys.modules[PLUGIN].TRACKED
    assert {step for step, _ in tracked} >= {1, 2}
    assert any(scalars for step, scalars in tracked if step == 2)
