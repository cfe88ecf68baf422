"""Every test asserts something.

A test is what pytest collects: a function ``test*`` at module level or a method ``test*`` of a class
``Test*``, in a file ``tests/**/test_*.py`` (or ``*_test.py``). It asserts when its body (nested functions included) has at least one of:

* an ``assert`` statement;
* ``pytest.raises``, ``pytest.warns``, ``pytest.deprecated_call`` or ``pytest.fail`` (``pytest.skip``
  and ``pytest.importorskip`` do not count: a test that can only skip checks nothing);
* a call to a function whose name starts with ``assert``, ``check``, ``expect`` or ``verify``
  (``torch.testing.assert_close``, ``np.testing.assert_allclose``, ``check_round_trip``);
* a call to a helper defined in the tests (in the same module, a method of the same class, or a
  function imported from another module under tests/) that itself asserts by the rules above. One
  level is followed: a helper that only calls another helper does not count, so keep the assertion
  in the helper the test calls, or assert on what it returns.

A test that only checks that something runs without raising says so in its name: it contains
``does_not_raise`` (``test_train_on_cpu_does_not_raise``), and is then exempt.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ASSERTING_PREFIXES = ("assert", "check", "expect", "verify")
PYTEST_CHECKS = {"raises", "warns", "deprecated_call", "fail"}
NO_RAISE_MARK = "does_not_raise"

Function = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass
class Module:
    path: Path
    tree: ast.Module
    functions: dict[str, Function]  # module-level defs, by name
    imports: dict[str, tuple[str, int]]  # local name → (module it comes from, relative level)


def _called_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_pytest_check(call: ast.Call) -> bool:
    func = call.func
    return (isinstance(func, ast.Attribute) and func.attr in PYTEST_CHECKS
            and isinstance(func.value, ast.Name) and func.value.id == "pytest")


def asserts_directly(fn: Function) -> bool:
    """An assert statement, a pytest check, or a call to an assert*/check*/expect*/verify* function."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and (_is_pytest_check(node)
                                           or _called_name(node).lower().startswith(ASSERTING_PREFIXES)):
            return True
    return False


def load_module(path: Path) -> Module:
    tree = ast.parse(path.read_text(), filename=str(path))
    functions = {node.name: node for node in tree.body if isinstance(node, Function)}
    imports = {alias.asname or alias.name: (node.module or "", node.level)
               for node in tree.body if isinstance(node, ast.ImportFrom) for alias in node.names}
    return Module(path, tree, functions, imports)


class Helpers:
    """Finds the definition of a helper a test calls: same module, same class, or imported from a
    module under tests/ (``from .helpers import run``, or ``from helpers import run`` with the test's
    folder on sys.path)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.modules: dict[Path, Module] = {}

    def module(self, path: Path) -> Module:
        if path not in self.modules:
            self.modules[path] = load_module(path)
        return self.modules[path]

    def _source_file(self, importer: Path, module: str, level: int) -> Path | None:
        parts = module.split(".") if module else []
        if level:  # relative: from the importer's package upwards
            base = importer.parent
            for _ in range(level - 1):
                base = base.parent
        elif parts and parts[0] == self.root.name:  # from tests.objectives.helpers import ...
            base, parts = self.root, parts[1:]
        else:  # a sibling module on sys.path (the test's own folder)
            base = importer.parent
        candidate = base.joinpath(*parts).with_suffix(".py") if parts else None
        return candidate if candidate is not None and candidate.is_file() else None

    def definition(self, module: Module, cls: ast.ClassDef | None, call: ast.Call) -> Function | None:
        func = call.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
            methods = {n.name: n for n in cls.body if isinstance(n, Function)} if cls is not None else {}
            return methods.get(func.attr)
        if not isinstance(func, ast.Name):
            return None
        if func.id in module.functions:
            return module.functions[func.id]
        if func.id in module.imports:
            source = self._source_file(module.path, *module.imports[func.id])
            if source is not None:
                return self.module(source).functions.get(func.id)
        return None

    def test_asserts(self, module: Module, cls: ast.ClassDef | None, fn: Function) -> bool:
        if asserts_directly(fn):
            return True
        calls = [node for node in ast.walk(fn) if isinstance(node, ast.Call)]
        return any((helper := self.definition(module, cls, call)) is not None and helper is not fn
                   and asserts_directly(helper) for call in calls)


def collect_tests(tree: ast.Module) -> list[tuple[ast.ClassDef | None, Function]]:
    found: list[tuple[ast.ClassDef | None, Function]] = []
    for node in tree.body:
        if isinstance(node, Function) and node.name.startswith("test"):
            found.append((None, node))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            found += [(node, item) for item in node.body if isinstance(item, Function) and item.name.startswith("test")]
    return found


def offenders(root: Path) -> list[str]:
    """``path::[Class::]test`` of every test that asserts nothing and does not say so in its name."""
    helpers = Helpers(root)
    found = []
    for path in sorted(root.rglob("*.py")):
        if not (path.name.startswith("test_") or path.name.endswith("_test.py")):  # pytest's test files
            continue
        module = helpers.module(path)
        for cls, fn in collect_tests(module.tree):
            if NO_RAISE_MARK in fn.name or helpers.test_asserts(module, cls, fn):
                continue
            where = "::".join(part for part in (str(path.relative_to(root.parent)), cls and cls.name, fn.name) if part)
            found.append(f"{where} (line {fn.lineno})")
    return found


def test_every_test_asserts_something():
    found = offenders(TESTS)
    assert not found, ("tests that assert nothing (assert on the result, or name them *does_not_raise*):\n  "
                       + "\n  ".join(found))


SYNTHETIC = '''
import pytest
from .helpers import shared_check, shared_quiet

def _verify(x):
    assert x

def _quiet(x):
    return x

def _indirect(x):
    _verify(x)

def test_asserts():
    assert 1 == 1

def test_raises():
    with pytest.raises(ValueError):
        int("x")

def test_helper_with_assert():
    _verify(1)

def test_imported_helper_with_assert():
    shared_quiet(shared_check(1))

def test_library_check():
    torch.testing.assert_close(a, b)

def test_setup_does_not_raise():
    _quiet(1)

def test_only_calls():
    _quiet(1)

def test_only_skips():
    pytest.importorskip("nothing")
    pytest.skip("never")

def test_two_levels_down():
    _indirect(1)

def test_imported_quiet_helper():
    shared_quiet(1)

class TestGroup:
    def _ok(self, x):
        assert x

    def test_method_helper(self):
        self._ok(1)

    def test_method_silent(self):
        print("nothing checked")

class Helper:
    def test_not_a_test_class(self):
        pass
'''

SYNTHETIC_HELPERS = '''
def shared_check(x):
    assert x
    return x

def shared_quiet(x):
    return x
'''


def test_synthetic_offenders_are_found(tmp_path):
    root = tmp_path / "tests"
    (root / "area").mkdir(parents=True)
    (root / "area" / "__init__.py").write_text("")
    (root / "area" / "test_synthetic.py").write_text(SYNTHETIC)
    (root / "area" / "helpers.py").write_text(SYNTHETIC_HELPERS)
    names = [line.split(" (line")[0] for line in offenders(root)]
    assert names == ["tests/area/test_synthetic.py::test_only_calls", "tests/area/test_synthetic.py::test_only_skips",
                     "tests/area/test_synthetic.py::test_two_levels_down",
                     "tests/area/test_synthetic.py::test_imported_quiet_helper",
                     "tests/area/test_synthetic.py::TestGroup::test_method_silent"]


def test_a_single_assert_less_test_fails_the_check(tmp_path):
    root = tmp_path / "tests"
    root.mkdir()
    (root / "test_one.py").write_text("def test_forgot():\n    x = 1 + 1\n")
    assert offenders(root) == ["tests/test_one.py::test_forgot (line 1)"]
    (root / "test_one.py").write_text("def test_forgot():\n    x = 1 + 1\n    assert x == 2\n")
    assert offenders(root) == []
