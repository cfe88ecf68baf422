"""gymnasium and MuJoCo are the optional ``control`` extra: without them the benchmark apparatus imports,
and the commands that need them exit 2 with one line naming the pip command.

"Without gymnasium" is simulated by ``sys.modules[name] = None``, which makes ``import name`` raise
ImportError exactly as for a package that is not installed.
"""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.control import make_config
from benchmarks.control.extra import MissingControlExtra, require_control_extra

from cli_forks import checkout_env  # tests/: the checkout on PYTHONPATH

ROOT = Path(__file__).resolve().parents[2]  # the checkout: the modules below are benchmarks.*
INSTALL = "pip install 'asyncrl[control]'"
BLOCK = "import sys\nsys.modules['gymnasium'] = sys.modules['mujoco'] = None\n"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def control_importers() -> list[str]:
    """Every module of benchmarks.control, and every module that imports it (at any level)."""
    names = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        name = _module_name(path)
        tree = ast.parse(path.read_text())
        imported = [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        imported += [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        touches_control = name.startswith("benchmarks.control") or any(m.startswith("benchmarks.control") for m in imported)
        if touches_control and path.name != "__main__.py" and path.parent.name != "benchmarks":  # scripts run on import
            names.append(name)
    return names


def test_scan_finds_the_control_corner():
    names = control_importers()
    assert {"benchmarks.control", "benchmarks.control.train", "benchmarks.control.envs", "benchmarks.control.run"} <= set(names)
    assert len(names) > len([n for n in names if n.startswith("benchmarks.control")])  # the bench's importers too


def test_without_gymnasium_everything_imports_and_bench_control_exits_2_with_one_line():
    """One process: import every module of the control corner and every module that imports it, then
    run ``python -m benchmarks control --quick --list`` (what a user without the extra would type), which
    imports the CLI and whatever it loads for the suite."""
    script = BLOCK + (f"import importlib\nfor name in {control_importers()!r}:\n    importlib.import_module(name)\n"
                      "assert sys.modules['gymnasium'] is None  # nothing slipped past the block\n"
                      "from benchmarks.bench.cli import main\n"
                      "sys.exit(main(['control', '--quick', '--list']))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=checkout_env())
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"benchmarks: bench control needs gymnasium: {INSTALL}"]
    assert proc.stdout == ""


def test_without_gymnasium_a_mujoco_study_names_both(monkeypatch, capsys):
    from benchmarks.bench.cli import main

    monkeypatch.setitem(sys.modules, "gymnasium", None)
    monkeypatch.setitem(sys.modules, "mujoco", None)
    assert main(["control", "--list"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"benchmarks: bench control needs gymnasium and MuJoCo: {INSTALL}"]


def test_control_run_without_gymnasium_exits_2_with_one_line(monkeypatch, capsys, tmp_path):
    from benchmarks.control.run import main

    monkeypatch.setitem(sys.modules, "gymnasium", None)
    assert main([f"out_dir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.splitlines() == [f"benchmarks.control: CartPole-v1 needs gymnasium: {INSTALL}"]
    assert not (tmp_path / "run").exists()


def test_building_envs_without_gymnasium_names_the_extra(monkeypatch):
    from benchmarks.control.envs import make_vector_env

    monkeypatch.setitem(sys.modules, "gymnasium", None)
    with pytest.raises(MissingControlExtra, match=r"CartPole-v1 needs gymnasium: pip install 'asyncrl\[control\]'"):
        make_vector_env(make_config("CartPole-v1"))


def test_cartpole_needs_only_gymnasium(monkeypatch):
    pytest.importorskip("gymnasium")
    monkeypatch.setitem(sys.modules, "mujoco", None)
    assert require_control_extra(["CartPole-v1"], "bench control") is None
    with pytest.raises(MissingControlExtra, match=r"^bench control needs MuJoCo: "):
        require_control_extra(["CartPole-v1", "Hopper-v5"], "bench control")
