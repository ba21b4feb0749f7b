"""The engine's layers, read from the source: imports go only downward, no circle, no private name crosses a module.

`constrained` is layers that hand each other values (docs/architecture.md); `agent` uses only its public API. Every
import counts: module level, inside a function, and under ``if TYPE_CHECKING:`` (a type-only import is still a
dependency a reader has to hold). The native extensions (``_kernel``, ``_fsm``, ``_pattern``) are the bottom layer.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
NATIVE = ("constrained._kernel", "constrained._fsm", "constrained._pattern")

LAYERS: tuple[tuple[str, ...], ...] = (
    NATIVE + ("constrained.errors",),
    ("constrained.dialect", "constrained.regex"),  # the pattern language: nodes, parser, writer
    ("constrained.vocabulary", "constrained.trie"),  # tokens
    ("constrained.automata", "constrained.fsm"),  # byte DFAs: no tokens
    ("constrained.rules",),  # rule sets and the call syntax
    ("constrained.frontends", "constrained.schema", "constrained.schema_keywords", "constrained.schema_depth",
     "constrained.gbnf"),  # input languages -> patterns and rule sets: no masks, grammars or caches
    ("constrained.shortcut", "constrained.index", "constrained.pushdown_masks"),  # masks
    ("constrained.matcher",),  # cursors: read their grammar through protocols
    ("constrained.pushdown", "constrained.grammar_file"),  # the pushdown grammar; the disk format
    ("constrained.grammar",),  # the one-DFA grammar, the caches, the compile entry points
    ("constrained.compile",),  # the one place that decides one DFA or rules for embedded schemas
    ("constrained.sampling", "constrained.llama", "constrained.decoding", "constrained.processor",
     "constrained.serving", "constrained.batching", "constrained.structured"),  # runtime
    ("constrained",),  # the public API
)
AGENT_MAY_IMPORT = ("constrained", "constrained.errors")
MAX_LINES = 900


def _modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[0] not in ("constrained", "agent"):
            continue
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str) -> Iterator[tuple[str, str, int]]:
    """(imported module, imported name or "", line) for every import in module ``name``, relative ones resolved."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                if submodule in MODULES or submodule in NATIVE:
                    yield submodule, "", node.lineno
                else:
                    yield base, alias.name, node.lineno


def _ours(module: str) -> bool:
    return module.split(".")[0] in ("constrained", "agent")


def _layer(module: str) -> int:
    best, rank = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, rank = len(prefix), i
    return rank


def _graph() -> dict[str, set[str]]:
    return {name: {target for target, _, _ in _imports(name) if _ours(target) and target != name} for name in MODULES}


def test_the_graph_sees_imports_inside_functions_and_under_type_checking():
    graph = _graph()
    assert "constrained.frontends.json_schema.translate" in graph["constrained.grammar"]  # inside functions only
    assert "constrained.matcher" in graph["constrained.decoding"]  # under TYPE_CHECKING only


def test_every_engine_module_has_a_layer():
    assert [name for name in MODULES if name.startswith("constrained") and _layer(name) < 0] == []


def test_the_engine_imports_only_downward():
    upward = [f"{name} (layer {_layer(name)}) imports {target} (layer {_layer(target)}) at line {line}"
              for name in MODULES if name.startswith("constrained")
              for target, _, line in _imports(name) if target.startswith("constrained") and target != name
              and _layer(target) > _layer(name)]
    assert upward == []


def test_no_import_circle():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in graph:
        if name not in index:
            visit(name)
    assert circles == []


def test_the_agent_uses_only_the_public_api():
    reaching_in = [f"{name}:{line} imports {target}" for name in MODULES if name.startswith("agent")
                   for target, _, line in _imports(name)
                   if target.startswith("constrained") and target not in AGENT_MAY_IMPORT]
    assert reaching_in == []


def test_no_module_reads_another_modules_private_name():
    found = []
    for name, path in MODULES.items():
        modules_here = {}
        for target, imported, line in _imports(name):
            if not _ours(target) or target in NATIVE:
                continue
            if imported.startswith("_") and not imported.startswith("__"):
                found.append(f"{name}:{line} imports {target}.{imported}")
            elif not imported:
                modules_here[target.rpartition(".")[2]] = target
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules_here
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.append(f"{name}:{node.lineno} reads {modules_here[node.value.id]}.{node.attr}")
    assert found == []


@pytest.mark.parametrize("name", [n for n in MODULES if n.startswith("constrained")])
def test_no_engine_module_is_over_the_line_limit(name):
    lines = MODULES[name].read_text(encoding="utf-8").count("\n")
    assert lines <= MAX_LINES, f"{name}: {lines} lines"


def _code_strings(tree: ast.AST) -> Iterator[ast.Constant]:
    """The string constants of a module that are code, not docstrings."""
    docstrings = {id(body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and (body := node.body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node


def test_the_rule_call_syntax_is_written_in_one_module():
    writers = [f"{name}:{node.lineno}" for name, path in MODULES.items() if name != "constrained.rules"
               for node in _code_strings(ast.parse(path.read_text(encoding="utf-8"))) if "(?&=" in node.value]
    assert writers == []


def test_the_literal_escaper_is_written_in_one_module():
    """A code point written as a dialect escape (``\\x41``, ``\\u00e9``) from a value is written by
    `constrained.dialect.writer` alone: one metacharacter set, one class-member rule."""
    writers = []
    for name, path in MODULES.items():
        if not name.startswith("constrained") or name == "constrained.dialect.writer":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.JoinedStr):
                for before, after in zip(node.values, node.values[1:]):
                    text = before.value if isinstance(before, ast.Constant) else ""
                    if (isinstance(after, ast.FormattedValue) and text[-2:] in ("\\x", "\\u", "\\U")
                            and not text.endswith("\\\\" + text[-1])):
                        writers.append(f"{name}:{node.lineno}")
    assert writers == []
