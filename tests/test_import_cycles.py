"""No import circle in src/onnxport, lazy imports included.

Every `import` and `from ... import` statement counts, at module level and inside functions
(a lazy import is still a dependency, only a later one), and so do those under
`if TYPE_CHECKING:` (a type is a dependency too: translate/ts_context.py shows the way round,
a protocol below both sides). Relative imports are resolved.
`from pkg import name` depends on the submodule `pkg.name` when there is one; otherwise on
the module that really defines `name`: a package `__init__` that only re-exports a name from
a submodule (`from pkg.sub import name`) is looked through, so a submodule reading its
package's re-exports is not counted as a circle through `__init__`, while one that reads a
name `__init__` defines itself is.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable, Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


@functools.cache
def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package)."""
    found = {}
    for path in sorted((SRC / "onnxport").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        package = parts[-1] == "__init__"
        found[".".join(parts[:-1] if package else parts)] = (path, package)
    return found


@functools.cache
def _tree(module: str) -> ast.Module:
    return ast.parse(_modules()[module][0].read_text(), filename=str(_modules()[module][0]))


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    path, package = _modules()[module]
    base = module.split(".") if package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


@functools.cache
def _reexports(package: str) -> dict[str, str]:
    """Names a package `__init__` binds at module level by importing them: name -> origin."""
    bound: dict[str, str] = {}
    for node in _tree(package).body:
        if isinstance(node, ast.ImportFrom):
            source = _absolute(package, node)
            for alias in node.names:
                bound[alias.asname or alias.name] = source + "." + alias.name \
                    if source + "." + alias.name in _modules() else _origin(source, alias.name)
    return bound


def _origin(module: str, name: str) -> str:
    """The module a `from module import name` depends on."""
    mods = _modules()
    if module + "." + name in mods:
        return module + "." + name
    if module in mods and mods[module][1] and name in _reexports(module):
        return _reexports(module)[name]
    return module


def _imports(module: str) -> dict[str, int]:
    """The onnxport modules `module` imports anywhere in its body -> first line."""
    edges: dict[str, int] = {}
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            source = _absolute(module, node)
            targets = [_origin(source, alias.name) for alias in node.names]
        else:
            continue
        for target in targets:
            if target in _modules() and target != module:
                edges.setdefault(target, node.lineno)
    return edges


def import_graph() -> dict[str, dict[str, int]]:
    return {module: _imports(module) for module in _modules()}


def find_cycles(graph: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan); `graph` maps each
    module to those it imports (tests/test_faults.py's import graph uses it too)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
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
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [set(c) for c in components]


def _cycle_in(graph: dict[str, dict[str, int]], component: set[str]) -> list[str]:
    """A shortest circle through the component's first module (breadth first)."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return paths[v] + [start]
            if w in component and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    raise AssertionError(f"no circle through {start}")


def _describe(graph: dict[str, dict[str, int]], component: set[str]) -> str:
    cycle = _cycle_in(graph, component)
    return (f"{len(component)} modules ({', '.join(sorted(component))}), e.g. "
            + " -> ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:]))
            + f" -> {cycle[-1]}")


def test_no_import_cycle() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    assert not cycles, "import circles (lazy imports included):\n" + "\n".join(
        _describe(graph, c) for c in cycles)


def test_a_lazy_circle_is_found() -> None:
    graph = import_graph()
    graph["onnxport.errors"] = {**graph["onnxport.errors"], "onnxport._api": 1}
    cycles = find_cycles(graph)
    assert any("onnxport.errors" in c and "onnxport._api" in c for c in cycles), cycles


def test_imports_inside_functions_and_relative_imports_count() -> None:
    tree = ast.parse("def f():\n    from .graphs import GraphSpec\n    import onnxport._api\n")
    _tree.cache_clear()
    original = _tree
    try:
        globals()["_tree"] = lambda module: tree if module == "onnxport.tasks.derive" \
            else original(module)
        edges = _imports("onnxport.tasks.derive")
    finally:
        globals()["_tree"] = original
    assert set(edges) == {"onnxport.tasks.graphs", "onnxport._api"}


def test_package_reexports_are_looked_through() -> None:
    # tasks/__init__ re-exports detect_task from tasks/registry: importing it depends on that.
    assert _origin("onnxport.tasks", "detect_task") == "onnxport.tasks.registry"
    assert _origin("onnxport", "tasks") == "onnxport.tasks"
    assert _origin("onnxport.tasks", "not_a_name") == "onnxport.tasks"
