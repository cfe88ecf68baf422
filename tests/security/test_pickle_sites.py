"""Every place src/ turns bytes into Python objects with pickle, read from the source: torch.load
only with ``weights_only=True``, torch.distributed.checkpoint only through the allow-listing reader
(asyncrl.distributed.dcp_reader), and plain pickle only at the sites vetted below, each with why
its bytes are trusted. A new site fails here, naming the file and line, until it is vetted."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "asyncrl"

# (file under src/asyncrl, enclosing function) -> why the bytes it unpickles are trusted
VETTED_PICKLE = {
    ("runtime/worker_entry.py", "start"): "a spawned worker's target and arguments, from its parent process",
    ("api.py", "_travelling"): "a round trip of the bytes cloudpickle made in this process a line earlier",
    ("core/import_path.py", "_unpickle"): "a .inputs/ function the user's own script pickled (code by design); "
                                         "a resume checks its content hash first (runtime/saved_inputs.py)",
}
VETTED_UNPICKLER = {("distributed/dcp_reader.py", "MetadataUnpickler"): "the allow-list itself"}
# calls that unpickle: (owner module as written, function)
PICKLE_CALLS = {("pickle", "load"), ("pickle", "loads"), ("cloudpickle", "load"), ("cloudpickle", "loads"),
                ("dill", "load"), ("dill", "loads"), ("joblib", "load"), ("marshal", "load"), ("marshal", "loads"),
                ("shelve", "open"), ("np", "load"), ("numpy", "load"), ("pd", "read_pickle"),
                ("pandas", "read_pickle")}


def _sites():
    """(file, line, enclosing function or class, call node) for every call in src/asyncrl."""
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        yield from _walk(tree, path.relative_to(SRC).as_posix(), "")


def _walk(node, file: str, scope: str):
    for child in ast.iter_child_nodes(node):
        inner = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else scope
        if isinstance(child, ast.Call):
            yield file, child.lineno, scope, child
        yield from _walk(child, file, inner)


def _dotted(node) -> str:
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


def _keyword(call: ast.Call, name: str):
    return next((kw.value for kw in call.keywords if kw.arg == name), None)


def test_torch_load_is_weights_only_everywhere():
    found = 0
    for file, line, _, call in _sites():
        if _dotted(call.func) == "torch.load":
            found += 1
            flag = _keyword(call, "weights_only")
            assert isinstance(flag, ast.Constant) and flag.value is True, \
                f"{file}:{line}: torch.load without weights_only=True"
    assert found, "no torch.load found: the test reads the wrong tree"


def test_plain_pickle_only_at_vetted_sites():
    seen = set()
    for file, line, scope, call in _sites():
        name = _dotted(call.func)
        owner, _, attr = name.rpartition(".")
        if (owner, attr) in PICKLE_CALLS or name == "torch.jit.load":
            assert (file, scope) in VETTED_PICKLE, f"{file}:{line}: {name}() in {scope or 'module'} is not vetted"
            seen.add((file, scope))
    assert seen == set(VETTED_PICKLE), f"vetted sites gone (drop them from the table): {set(VETTED_PICKLE) - seen}"


def test_unpicklers_are_only_the_allow_list():
    for path in sorted(SRC.rglob("*.py")):
        file = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any("Unpickler" in _dotted(base) for base in node.bases):
                assert (file, node.name) in VETTED_UNPICKLER, f"{file}:{node.lineno}: an Unpickler that is not vetted"
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("Unpickler"):
                assert _dotted(node.func) == "MetadataUnpickler", f"{file}:{node.lineno}: {_dotted(node.func)}()"


def test_distributed_checkpoints_are_read_through_the_allow_list():
    """DCP's FileSystemReader unpickles .metadata with plain pickle; every load names our reader."""
    loads = 0
    for file, line, _, call in _sites():
        name = _dotted(call.func)
        if name.endswith("FileSystemReader"):
            raise AssertionError(f"{file}:{line}: {name}() reads .metadata with plain pickle; "
                                 "use dcp_reader.safe_reader")
        if name in ("dcp.load", "torch.distributed.checkpoint.load", "dcp.state_dict_loader.load"):
            loads += 1
            reader = _keyword(call, "storage_reader")
            assert isinstance(reader, ast.Call) and _dotted(reader.func) == "safe_reader", \
                f"{file}:{line}: {name}() without storage_reader=safe_reader(...)"
        if name.endswith("read_metadata") and file != "distributed/dcp_reader.py":
            raise AssertionError(f"{file}:{line}: read_metadata() outside dcp_reader")
    assert loads, "no dcp.load found: the test reads the wrong tree"
