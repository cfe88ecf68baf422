"""No import cycle inside the package, counting imports inside functions too (a lazy import that
closes a loop is still two modules that cannot be understood apart)."""

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in SRC.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative import
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names]
            for target in targets:
                while target and target not in files:  # asyncrl.x.y (an attribute) → asyncrl.x
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("asyncrl"):
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


def test_finder_sees_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle_in_src():
    graph = import_graph()
    assert "asyncrl.runtime.loop" in graph and "asyncrl.bench.runner" in graph
    assert "asyncrl.cli" not in graph["asyncrl.bench.runner"]
    cycle = find_cycle(graph)
    assert cycle is None, " → ".join(cycle)


LLM_RUNTIME = ("asyncrl.runtime", "asyncrl.trainer", "asyncrl.policy", "asyncrl.tasks", "asyncrl.rollout",
               "asyncrl.buffer", "asyncrl.config", "asyncrl.bench", "asyncrl.cli")


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        for nxt in graph.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_control_imports_only_objectives():
    """asyncrl.control is classic RL on the pure objectives: nothing of the LLM runtime, transitively."""
    graph = import_graph()
    control = [name for name in graph if name == "asyncrl.control" or name.startswith("asyncrl.control.")]
    assert "asyncrl.control.train" in control
    for module in control:
        outside = {m for m in reachable(graph, module) if not m.startswith("asyncrl.control")}
        assert all(m == "asyncrl" or m.startswith("asyncrl.objectives") for m in outside), (module, outside)
        assert not any(m == p or m.startswith(p + ".") for m in outside for p in LLM_RUNTIME)
