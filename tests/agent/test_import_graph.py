"""No import circles in `agent`: every import counts, those under ``if TYPE_CHECKING:`` and inside functions too.

The graph is read from the source with `ast` (nothing is imported): an edge A → B for every ``import B`` /
``from B import x`` in A, and ``from B import x`` where ``B.x`` is itself a module counts as an edge to ``B.x``.
A package's ``__init__`` is the package's node; importing a submodule does not add an edge to its package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agent

ROOT = Path(agent.__file__).parent
KNOWN_CYCLES: set[frozenset[str]] = set()
"""Cycles left to another change, each named in a comment (none now)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _resolve(module: str, level: int, current: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def import_graph() -> dict[str, set[str]]:
    """Module → the agent modules it imports, anywhere in its source."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node.module or "", node.level, name, path.name == "__init__.py")
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:  # ``import agent.x.y`` where y is an attribute
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module, each as a cycle through it."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_through(graph, set(c)) for c in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """One concrete cycle inside a strongly connected component: start → … → start."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & component):
                if w == start:
                    return paths[v] + [start]
                if w not in paths:
                    paths[w] = paths[v] + [w]
                    nxt.append(w)
        frontier = nxt
    return sorted(component)  # pragma: no cover - a component always holds a cycle


def test_the_graph_sees_type_checking_and_function_local_imports() -> None:
    graph = import_graph()
    assert "agent.artifact" in graph["agent.tool.definition"]  # under `if TYPE_CHECKING:`
    assert "agent.runner" in graph["agent.cli"]  # inside a function
    assert "agent.tool.execution" in graph["agent.tool"]  # `from agent.tool.execution import execute_tool`


def test_find_cycles_reports_a_cycle_as_a_path() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_agent_has_no_import_cycles() -> None:
    cycles = [c for c in find_cycles(import_graph()) if frozenset(c) not in KNOWN_CYCLES]
    assert not cycles, "import cycles in agent:\n" + "\n".join(" → ".join(c) for c in cycles)
