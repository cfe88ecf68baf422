"""benchmarks.control is classic RL on the library's pure objectives: of asyncrl it imports
asyncrl.objectives (and the root package, which the import runs), nothing of the LLM runtime,
transitively."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "foundation"))
from test_import_graph import import_graph, outside_imports  # noqa: E402

LLM_RUNTIME = ("asyncrl.runtime", "asyncrl.training.trainer", "asyncrl.policy", "asyncrl.tasks", "asyncrl.rollout",
               "asyncrl.config", "asyncrl.cli")


def reachable(graph: dict[str, set[str]], start: set[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_control_imports_only_the_objectives():
    direct = outside_imports(ROOT / "benchmarks" / "control", ("asyncrl", "benchmarks"))
    assert any(edge.startswith("train → asyncrl.objectives") for edge in direct)  # the check sees imports
    assert not [edge for edge in direct if "benchmarks" in edge and "benchmarks.control" not in edge]
    graph = import_graph()
    targets = {edge.split(" → ")[1] for edge in direct if " → asyncrl" in edge}
    while any(t not in graph for t in targets):  # asyncrl.objectives.x.f (an attribute) → its module
        targets = {t if t in graph else t.rpartition(".")[0] for t in targets}
    outside = reachable(graph, targets)
    # the objectives and the foundations under them (asyncrl.core: the registry class, no component)
    assert all(m == "asyncrl" or m.startswith(("asyncrl.objectives", "asyncrl.core")) for m in outside), outside
    assert not any(m == p or m.startswith(p + ".") for m in outside for p in LLM_RUNTIME)
