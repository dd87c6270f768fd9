"""No import cycle among graphtape's modules, counting imports inside functions.

A function-local import hides a cycle from Python (it resolves late) but not
from a reader: two modules that need each other are one module in two files.
The graph is built from the source with ``ast``: every ``import`` and
``from ... import`` anywhere in a module (functions included), except under
``if TYPE_CHECKING:`` (annotations only, never executed). ``from graphtape.x
import y`` counts as importing ``graphtape.x.y`` when that is a module,
else ``graphtape.x``. Importing a submodule is not counted as importing its
package's ``__init__``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import graphtape

SRC = Path(graphtape.__file__).parent

#: Cycles outside record/, replay/, debug/ and runtime/recovery.py still being removed, as the module
#: pairs that close them (the lead removes each entry once the cycle is gone).
KNOWN: set[tuple[str, str]] = set()


def _module_name(path: Path) -> str:
    parts = ["graphtape", *path.relative_to(SRC).with_suffix("").parts]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, name: str, is_package: bool, modules: set[str]) -> set[str]:
    out: set[str] = set()

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for orelse in node.orelse:
                visit(orelse)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("graphtape"):
                    target = resolve(alias.name)
                    if target:
                        out.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name if is_package else name.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            if base.startswith("graphtape"):
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    target = sub if sub in modules else resolve(base)
                    if target:
                        out.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    names = set(modules)
    return {
        name: _imports(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py", names)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a sorted list."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strongconnect(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strongconnect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strongconnect(v)
    return found


def _without_known(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {t for t in targets if (m, t) not in KNOWN} for m, targets in graph.items()}


def _path(graph: dict[str, set[str]], comp: list[str]) -> str:
    """One concrete cycle through the component, for the failure message."""
    members = set(comp)
    start = comp[0]
    seen = {start: [start]}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    return " -> ".join([*seen[v], start])
                if w not in seen:
                    seen[w] = [*seen[v], w]
                    nxt.append(w)
        frontier = nxt
    return ", ".join(comp)  # pragma: no cover - a component always closes


def test_no_import_cycles():
    graph = _without_known(import_graph())
    found = cycles(graph)
    assert not found, "import cycles (function-local imports count):\n" + "\n".join(_path(graph, c) for c in found)


def test_known_cycles_are_still_cycles():
    """An entry of KNOWN that no longer closes a cycle must be removed (the list only shrinks)."""
    graph = import_graph()
    stale = [pair for pair in KNOWN if pair[1] not in graph.get(pair[0], set())]
    assert not stale, f"remove from KNOWN (no such import any more): {stale}"


def test_the_checker_sees_function_local_cycles():
    tree_a = ast.parse("def f():\n    from graphtape.b import x\n")
    tree_b = ast.parse("import graphtape.a\nif TYPE_CHECKING:\n    from graphtape.c import y\n")
    mods = {"graphtape.a", "graphtape.b", "graphtape.c"}
    graph = {
        "graphtape.a": _imports(tree_a, "graphtape.a", False, mods),
        "graphtape.b": _imports(tree_b, "graphtape.b", False, mods),
        "graphtape.c": set(),
    }
    assert graph["graphtape.b"] == {"graphtape.a"}  # the TYPE_CHECKING import is not counted
    assert cycles(graph) == [["graphtape.a", "graphtape.b"]]


def test_only_the_cli_imports_the_cli():
    """The CLI is a thin layer over the library: the server, the store, the runtime and the rest never
    import it (what both need, such as showing a recorded value, lives in the library)."""
    graph = import_graph()
    offenders = sorted(
        f"{name} imports {target}"
        for name, targets in graph.items()
        if not name.startswith("graphtape.cli")
        for target in targets
        if target.startswith("graphtape.cli")
    )
    assert not offenders, "\n".join(offenders)
