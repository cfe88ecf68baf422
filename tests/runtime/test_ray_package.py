"""Ray is an optional dependency, and all of asyncrl's Ray code is the package asyncrl.runtime.ray:
no module outside it imports ray, importing the runtime (or the package's own module, or its
reaper) loads no Ray, and the registries name the package's entries."""

import ast
import subprocess
import sys
from pathlib import Path

from asyncrl.core.registries import BACKENDS, CHANNELS

SRC = Path(__file__).resolve().parents[2] / "src"
RAY_PACKAGE = SRC / "asyncrl" / "runtime" / "ray"


def _imports_ray(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "ray" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == "ray":
            return True
    return False


def test_only_the_ray_package_imports_ray():
    outside = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if RAY_PACKAGE not in p.parents and _imports_ray(p)]
    assert outside == []


def test_the_runtime_loads_no_ray():
    code = ("import sys; import asyncrl.runtime, asyncrl.runtime.backends, asyncrl.runtime.ray, "
            "asyncrl.runtime.ray.reaper; print(sorted(m for m in sys.modules if m.split('.')[0] == 'ray'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_the_reaper_runs_on_the_standard_library_alone():
    """The reaper runs its file as a script in isolated mode: no asyncrl on the path, no Ray."""
    reaper = RAY_PACKAGE / "reaper.py"
    imported = {a.name.split(".")[0] for node in ast.walk(ast.parse(reaper.read_text()))
                if isinstance(node, ast.Import) for a in node.names}
    imported |= {node.module.split(".")[0] for node in ast.walk(ast.parse(reaper.read_text()))
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_the_registries_name_the_ray_package():
    assert BACKENDS["ray"].target == "asyncrl.runtime.ray:ray_pool"
    assert CHANNELS["ray"].target.startswith("asyncrl.runtime.ray.")
