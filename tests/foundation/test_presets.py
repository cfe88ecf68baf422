"""Presets ship inside the package (`--config a3po` works from any directory and from a wheel),
their only copy; each loads, and the docs' table names each one."""

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from asyncrl.config import ConfigError, load_config
from asyncrl.config.presets import PRESETS_DIR, preset_names, resolve_config_path
from asyncrl.runtime.validate import load_run_config

ROOT = Path(__file__).resolve().parents[2]


def test_packaged_presets():
    assert {"a3po", "recompute", "sync", "gpu-embedded", "gpu-gsm8k"} <= set(preset_names())


def test_every_preset_loads_and_the_docs_name_it(tmp_path):
    rows = tmp_path / "train.jsonl"
    rows.write_text('{"question": "What is 2 + 3?", "answer": "#### 5"}\n')
    table = (ROOT / "docs" / "config.md").read_text()
    for name in preset_names():
        task = (yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text()).get("task") or {}).get("name")
        files = [f"task.path={rows}"] if task not in (None, "arithmetic") else []  # the user's data files
        load_run_config(name, files)  # loads, and passes the run's checks
        assert f"| `{name}` |" in table, f"docs/config.md's preset table does not name {name}"


def test_presets_have_one_copy():
    """No YAML twin of a preset elsewhere in the repository (a second copy drifts)."""
    packaged = {p.read_bytes() for p in PRESETS_DIR.glob("*.yaml")}
    twins = [p for p in ROOT.rglob("*.yaml") if PRESETS_DIR not in p.parents and ".venv" not in p.parts
             and p.read_bytes() in packaged]
    assert twins == []


def test_bare_name_resolves_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_config("sync").loss.name == "ppo"
    assert load_config("recompute").trainer.prox == "recompute"
    assert load_config("a3po") == load_config()  # the defaults are A-3PO


def test_an_existing_file_wins_over_a_preset(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sync").write_text("trainer:\n  steps: 3\n")
    assert resolve_config_path("sync") == Path("sync")
    assert load_config("sync").trainer.steps == 3


@pytest.mark.parametrize("text", ["a3p0", "sync.yml"])
def test_unknown_preset_is_one_line_listing_them(text):
    with pytest.raises(ConfigError) as info:
        load_config(text)
    message = str(info.value)
    assert "\n" not in message and text in message
    if text == "a3p0":
        assert all(name in message for name in preset_names())


@pytest.mark.slow
def test_wheel_contains_the_presets(tmp_path):
    # built from a copy: an in-tree build would reuse (and ship) whatever build/lib holds
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(tree), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(tmp_path / "dist")], check=True, capture_output=True, timeout=600)
    (wheel,) = (tmp_path / "dist").glob("asyncrl-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"asyncrl/config/presets/{n}.yaml" for n in preset_names()} <= names
    assert "asyncrl/config/presets/__init__.py" in names
    # the benchmark apparatus is the repository's (benchmarks/), never the installed package's
    assert not [n for n in names if n.startswith(("asyncrl/bench/", "asyncrl/control/", "benchmarks/"))]


def test_async_names_the_defaults_as_sync_names_the_baseline():
    from asyncrl.config import load_config

    assert load_config("async").to_dict() == load_config(None).to_dict()
    assert load_config("sync").run.mode == "sync"
