"""A ``run.plugins`` module that calls ``sys.exit`` or raises ``KeyboardInterrupt`` while it is
imported is refused at config load, in one line, exit 2, by ``train`` and ``config`` alike (it
would otherwise end the command with its own status, having done nothing), as a reward module is:
both imports go through asyncrl.core.user_code.import_guarded. A real Ctrl-C during a slow import
still interrupts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from asyncrl.config import load_config
from asyncrl.runtime.validate import load_run_config
from asyncrl.core.loader import ConfigError
from cli_forks import shared_forks

MODULES = {
    "exits_zero": ("import sys\nsys.exit(0)\n", "the module called sys.exit(0) while being imported"),
    "exits_three": ("import sys\nsys.exit(3)\n", "the module called sys.exit(3) while being imported"),
    "interrupts": ("raise KeyboardInterrupt\n", "the module raised KeyboardInterrupt while being imported"),
}


def _cli(tmp_path, args: list[str]) -> subprocess.CompletedProcess:
    """``asyncrl ARGS`` in ``tmp_path``, forked from a process that imported the CLI, with the
    working directory importable (as ``python -m asyncrl.cli`` has it)."""
    return shared_forks().run(args, tmp_path, {"HF_HUB_OFFLINE": "1"}, prelude="import sys; sys.path.insert(0, '')")


@pytest.mark.parametrize("command", ["train", "config"])
@pytest.mark.parametrize("name", list(MODULES))
def test_a_plugin_that_exits_at_import_is_one_line(tmp_path, name, command):
    code, expected = MODULES[name]
    (tmp_path / f"{name}.py").write_text(code)
    proc = _cli(tmp_path, [command, f"run.plugins=[{name}]", "run.out_dir=runs"])
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stderr == f"asyncrl: config error: run.plugins[0]: cannot import '{name}': {expected}\n"
    assert proc.stdout == "" and not (tmp_path / "runs").exists()


def test_a_plugin_named_in_a_config_file_is_refused_the_same_way(tmp_path):
    (tmp_path / "exits_zero.py").write_text(MODULES["exits_zero"][0])
    (tmp_path / "c.yaml").write_text("run:\n  plugins: [exits_zero]\n")
    proc = _cli(tmp_path, ["config", "--config", "c.yaml"])
    assert proc.returncode == 2 and proc.stderr.strip().endswith("the module called sys.exit(0) while being imported")


def test_the_python_api_gets_the_same_config_error(tmp_path, monkeypatch):
    (tmp_path / "interrupts_api.py").write_text(MODULES["interrupts"][0])
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^config error: run.plugins\[1\]: cannot import 'interrupts_api': the "
                                          r"module raised KeyboardInterrupt while being imported$"):
        load_run_config(None, ["run.plugins=[json, interrupts_api]"])


def test_a_reward_module_raising_keyboardinterrupt_at_import_is_one_line(tmp_path):
    from asyncrl.core.import_path import resolve

    (tmp_path / "stop.py").write_text("raise KeyboardInterrupt\ndef f(c): return c\n")
    with pytest.raises(ValueError, match=r"cannot import '.*stop.py:f': the module raised KeyboardInterrupt while "
                                         r"being imported"):
        resolve(f"{tmp_path / 'stop.py'}:f")


def test_a_real_ctrl_c_during_a_plugin_import_still_interrupts(tmp_path):
    (tmp_path / "slow_plugin.py").write_text("import pathlib, time\npathlib.Path('importing').touch()\n"
                                             "time.sleep(60)\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HF_HUB_OFFLINE": "1"}
    # SIGINT back to its default in the child: a test run started in the background (`make test &`, CI)
    # ignores SIGINT, and a child inherits that, so the Ctrl-C below would never arrive
    proc = subprocess.Popen([sys.executable, "-m", "asyncrl.cli", "config", "run.plugins=[slow_plugin]"], cwd=tmp_path,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not (tmp_path / "importing").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and err == "asyncrl: interrupted\n", (proc.returncode, err)
