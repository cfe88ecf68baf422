"""The import graph of src/: no cycle, and no import from a lower layer into a higher one.

What counts as an edge, module → module:
* every ``import`` and ``from ... import``, at module level or inside a function: a lazy import
  that closes a loop is still two modules that cannot be understood apart, and a lazy import of a
  higher layer is still a lower layer that knows about a higher one;
* an import by name, ``import_module("asyncrl.x")`` (a module ``__getattr__`` that loads a
  submodule on first use is the usual case), and an f-string name counts as an edge to the package
  its constant prefix names: such a module names its target as surely as an ``import`` does.
  What does not count is a registry's import path (``"asyncrl.runtime.backends:local_pool"`` in asyncrl.core.registries): a
  string the runtime resolves when it builds the part, which is how a lower layer names a higher
  layer's parts without depending on them;
* importing ``a.b.c`` executes the ``__init__`` of the packages ``a`` and ``a.b`` first, so those
  count as targets too, except the importer's own enclosing packages (already being executed);
* ``from pkg import x`` reads the namespace of ``pkg``'s ``__init__``, so it always counts as an
  edge to ``pkg``, even from inside ``pkg``: a module of ``pkg`` that does this while ``pkg``'s
  ``__init__`` imports it (directly or not) is a hidden cycle.
"""

import ast
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Low to high; a module may import its own layer and the layers below, never a layer above. A
# package's place is that of its longest listed prefix; every module must have one.
LAYERS: list[tuple[str, ...]] = [
    # foundations: no knowledge of any component (asyncrl.core: loader, registries, disk, cache,
    # progress, plotting)
    ("asyncrl.types", "asyncrl.core"),
    # the typed run configuration (its presets and the parts' own settings sections, config.parts):
    # a leaf over core, which every part may read. It checks what the config alone can tell; what
    # needs the parts (registries, plugins, user code) is asyncrl.runtime.validate's
    ("asyncrl.config",),
    # the parts, each usable alone: pure objectives, problems and rewards, trackers and metric rows
    ("asyncrl.objectives", "asyncrl.stability", "asyncrl.tasks", "asyncrl.rewards",
     "asyncrl.tracking",
     # agents: the environment registry and seam, tools, rendering of turns, episode statistics
     "asyncrl.agents",
     # the world of a torchrun job (which process this is, its collectives, heartbeats, agreement),
     # below the trainer, and the sharded trainer's settings
     "asyncrl.distributed"),
    # the integrations (guess, calculator, GEM, reasoning-gym, TRL's environment classes), one file
    # each, built on the tasks and the agents' seam; those name them by import path, never import them
    ("asyncrl.envs",),
    # machinery over one model: weights, generation engines, the trainer and its parts, evaluation,
    # warm start, checkpoints; over several ranks, FSDP2 sharding, the data-parallel split and the
    # optimizer's shards (asyncrl.training.fsdp, .data_parallel, .sharded_state)
    # (episodes played with an engine and scored into batches included)
    ("asyncrl.policy", "asyncrl.rollout", "asyncrl.training", "asyncrl.agents.episode", "asyncrl.agents.rollout",
     "asyncrl.agents.harness_runner"),
    # the training loop, batch sources, the buffer, workers, weight channels, backends, rank 0's lead
    # of the other ranks (asyncrl.runtime.ranks), and the run's check of its config against the parts
    # (asyncrl.runtime.validate)
    ("asyncrl.runtime",),
    # what describes the config to users (plan: its memory and time on paper) and the public face:
    # the root package, whose ``asyncrl.train`` is the API's (loaded by name on first use, so
    # ``import asyncrl`` stays light; still an edge to asyncrl.api). The benchmark apparatus is not
    # here: it is the repository's benchmarks/ package, which src/ never imports (test below)
    ("asyncrl.config.help", "asyncrl.api", "asyncrl.plan", "asyncrl"),
    ("asyncrl.cli",),
    ("asyncrl.__main__",),  # python -m asyncrl
]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _enclosing(name: str) -> set[str]:
    """The packages whose ``__init__`` runs before module ``name``: a.b.c → {a, a.b}."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts))}


def _targets(node: ast.AST, package: str, files: dict[str, Path]) -> list[tuple[str, bool]]:
    """(module, read_namespace) pairs an import statement executes; read_namespace: the statement
    reads that module's attributes itself (``from pkg import x``)."""
    if isinstance(node, ast.Import):
        return [(a.name, False) for a in node.names]
    if isinstance(node, ast.Call) and _by_name(node) is not None:
        return [(_by_name(node), False)]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:  # relative import
        parts = package.split(".")
        base = ".".join(parts[: len(parts) - node.level + 1] + [base]).strip(".")
    found = [(base, True)]
    found += [(f"{base}.{a.name}", False) for a in node.names if f"{base}.{a.name}" in files]
    return found


def _by_name(node: ast.Call) -> str | None:
    """The module an ``import_module(...)``/``__import__(...)`` call names: its string literal, or
    the package named by an f-string's constant prefix (``f"asyncrl.tracking.{x}"`` →
    ``asyncrl.tracking``); None for any other call or a name held in a variable."""
    func = node.func
    called = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if called not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rpartition(".")[0] or None
    return None


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        running = _enclosing(name) | {name}
        for node in ast.walk(ast.parse(path.read_text())):
            for target, reads in _targets(node, package, files):
                while target and target not in files:  # asyncrl.x.y (an attribute) → asyncrl.x
                    target = target.rpartition(".")[0]
                if not target.startswith("asyncrl"):
                    continue
                executed = {p for p in _enclosing(target) | {target} if p in files}
                graph[name] |= executed - running
                if reads and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def layer_of(module: str) -> int | None:
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for layer, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            exact_only = prefix == "asyncrl"  # the root package itself, not everything under it
            matches = module == prefix or (not exact_only and module.startswith(prefix + "."))
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{a} (layer {layer_of(a)}) → {b} (layer {layer_of(b)})"
                  for a, targets in graph.items() for b in targets if layer_of(a) < layer_of(b))


def test_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_edges_count_package_inits(tmp_path, monkeypatch):
    """A hand-built tree: the package __init__ runs on `import asyncrl.p.m`, and a module that reads
    its own package's namespace while that __init__ imports it closes a loop."""
    pkg = tmp_path / "asyncrl" / "p"
    pkg.mkdir(parents=True)
    (tmp_path / "asyncrl" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from asyncrl.p.loop import run\n")
    (pkg / "loop.py").write_text("from asyncrl.p.session import Session\n\ndef run(): ...\n")
    (pkg / "session.py").write_text("from asyncrl.p import helper\n\nclass Session: ...\n")
    (pkg / "helper.py").write_text("")
    (tmp_path / "asyncrl" / "user.py").write_text("def f():\n    import asyncrl.p.helper\n")
    (tmp_path / "asyncrl" / "lazy.py").write_text(
        "from importlib import import_module\n\ndef __getattr__(name):\n"
        "    return import_module('asyncrl.p.loop').run\n\ndef g(k):\n    return import_module(f'asyncrl.p.{k}')\n")
    monkeypatch.setattr(sys.modules[__name__], "SRC", tmp_path)
    graph = import_graph()
    assert graph["asyncrl.user"] == {"asyncrl.p", "asyncrl.p.helper"}  # the lazy import counts
    assert graph["asyncrl.lazy"] == {"asyncrl.p", "asyncrl.p.loop"}  # by name, in __getattr__ and f-strings
    assert graph["asyncrl.p.loop"] == {"asyncrl.p.session"}  # its own package is already running
    assert graph["asyncrl.p.session"] == {"asyncrl.p", "asyncrl.p.helper"}
    assert find_cycle(graph) == ["asyncrl.p", "asyncrl.p.loop", "asyncrl.p.session", "asyncrl.p"]


def test_no_import_cycle_in_src():
    graph = import_graph()
    assert "asyncrl.runtime.loop" in graph and "asyncrl.cli" in graph
    cycle = find_cycle(graph)
    assert cycle is None, " → ".join(cycle)


def package_of(module: str) -> str:
    """The top-level package (or root module) ``module`` belongs to: asyncrl.runtime.channels.flat →
    asyncrl.runtime; asyncrl.types → asyncrl.types; asyncrl → asyncrl."""
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` collapsed to packages: an edge between two packages where any module of one imports
    any module of the other (a package's imports of itself left out)."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, targets in graph.items():
        packages[package_of(module)] |= {package_of(t) for t in targets} - {package_of(module)}
    return packages


def test_no_package_cycle_in_src():
    """No two packages import each other, even through different modules: a package that needs
    another which needs it back cannot be understood, tested or moved alone, however acyclic the
    modules are."""
    modules = {"asyncrl.a.x": {"asyncrl.b.y"}, "asyncrl.b.y": set(), "asyncrl.b.z": {"asyncrl.a.w"},
               "asyncrl.a.w": {"asyncrl.a.x"}}
    assert find_cycle(modules) is None  # acyclic as modules ...
    assert find_cycle(package_graph(modules)) == ["asyncrl.a", "asyncrl.b", "asyncrl.a"]  # ... not as packages
    packages = package_graph(import_graph())
    assert {"asyncrl.training", "asyncrl.distributed", "asyncrl.runtime", "asyncrl.types"} <= set(packages)
    cycle = find_cycle(packages)
    assert cycle is None, " → ".join(cycle)


def test_every_module_has_a_layer():
    assert [m for m in import_graph() if layer_of(m) is None] == []
    assert layer_of("asyncrl") == layer_of("asyncrl.api") and layer_of("asyncrl.types") == 0 and layer_of("asyncrl.runtime.channels.flat") == layer_of("asyncrl.runtime")
    assert layer_of("asyncrl.core.loader") < layer_of("asyncrl.config") < layer_of("asyncrl.config.help")


def test_config_imports_only_core():
    """asyncrl.config is a leaf: its modules (help and peers included) import asyncrl.core and each
    other, nothing else of asyncrl, lazily or not; the checks that need a part live in
    asyncrl.runtime.validate."""
    graph = import_graph()
    config = [name for name in graph if name == "asyncrl.config" or name.startswith("asyncrl.config.")]
    assert {"asyncrl.config.run", "asyncrl.config.parts", "asyncrl.config.help"} <= set(config)
    leaf = ("asyncrl.config", "asyncrl.core")
    outside = {(module, target) for module in config for target in graph[module]
               if not any(target == p or target.startswith(p + ".") for p in leaf)}
    assert outside == set(), sorted(outside)
    assert layer_of("asyncrl.config") == layer_of("asyncrl.core") + 1


def test_no_upward_import_in_src():
    graph = import_graph()
    assert upward_imports({"asyncrl.config.run": {"asyncrl.runtime.loop"}}) != []  # the check can fail
    assert upward_imports(graph) == []


def outside_imports(src: Path, names: tuple[str, ...]) -> list[str]:
    """``module → target`` for every import under ``src`` (by statement or by name) of a top-level
    package in ``names``."""
    found = []
    for path in sorted(src.rglob("*.py")):
        name = ".".join(path.relative_to(src).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            for target, _ in _targets(node, name.rpartition(".")[0], {}):
                if target.split(".")[0] in names:
                    found.append(f"{name} → {target}")
    return found


def test_the_library_never_imports_the_repositorys_apparatus(tmp_path):
    """src/ is what gets installed: the benchmark apparatus, examples and tests of the repository are
    not there, so nothing in src/ may import them (lazily or by name included)."""
    (tmp_path / "m.py").write_text("import os\ndef f():\n    from benchmarks.bench import runner\n")
    assert outside_imports(tmp_path, ("benchmarks",)) == ["m → benchmarks.bench"]  # the check can fail
    assert outside_imports(SRC, ("benchmarks", "examples", "tests")) == []


def test_the_package_root_holds_at_most_ten_modules():
    """The root is the public face (API, CLI, the batch types); everything else lives in a package
    named for its job, so that the layout is the architecture."""
    root = sorted(p.name for p in (SRC / "asyncrl").glob("*.py"))
    assert len(root) <= 10, root
