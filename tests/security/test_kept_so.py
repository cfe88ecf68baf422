"""What held in the security review, kept so by reading the source: no remote code from a model
folder, hub files only from local disk, YAML without object construction, an HTML report that
escapes. A new call site that breaks one of these fails here, naming the file and line."""

import ast
import functools
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "asyncrl"


@functools.lru_cache(maxsize=1)
def _all_calls() -> list[tuple[str, str, ast.Call]]:
    """(called name, file:line, call) for every call in src/, parsed once."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
                found.append((called, f"{path.relative_to(SRC)}:{node.lineno}", node))
    return found


def _calls(name: str):
    """(file:line, call) for every call of an attribute or function named ``name`` in src/."""
    return [(where, node) for called, where, node in _all_calls() if called == name]


def _keyword(call: ast.Call, name: str):
    for kw in call.keywords:
        if kw.arg == name:
            return kw.value
    return None


def test_models_and_tokenizers_load_from_local_files_without_remote_code():
    sites = list(_calls("from_pretrained"))
    assert sites, "no from_pretrained call found: the test reads the wrong tree"
    for where, call in sites:
        local = _keyword(call, "local_files_only")
        assert isinstance(local, ast.Constant) and local.value is True, f"{where}: local_files_only=True missing"
        remote = _keyword(call, "trust_remote_code")
        assert remote is None or (isinstance(remote, ast.Constant) and remote.value is False), \
            f"{where}: trust_remote_code must not be set"


def test_no_keyword_spread_can_set_trust_remote_code():
    """``**extra`` passed to from_pretrained is built in our code: none of it names the key."""
    for path in sorted(SRC.rglob("*.py")):
        text = path.read_text()
        for lineno, line in enumerate(text.splitlines(), 1):
            if "trust_remote_code" in line and not line.lstrip().startswith(("#", "('", '("', "'", '"')):
                raise AssertionError(f"{path.relative_to(SRC)}:{lineno}: {line.strip()}")


def test_yaml_is_read_safely():
    for name in ("load", "full_load", "unsafe_load", "load_all", "unsafe_load_all"):
        for where, call in _calls(name):
            func = call.func
            owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else ""
            assert owner != "yaml", f"{where}: yaml.{name}; use yaml.safe_load"


def test_html_report_escapes():
    sites = list(_calls("Environment"))
    assert sites, "no jinja2 Environment found"
    for where, call in sites:
        escape = _keyword(call, "autoescape")
        assert isinstance(escape, ast.Constant) and escape.value is True, f"{where}: autoescape=True missing"
