"""The house's shape, computed from the source: imports run one way and never in a circle.

Every ``import`` and ``from ... import`` statement of every module in the four packages counts,
at module level or inside a function (a deferred import is still a dependency). The packages'
allowed directions: ``ledger`` (the core) imports none of the others; ``runner`` imports only
``ledger``; ``analysis`` imports ``runner``, ``ledger`` and ``verify``; ``verify`` imports none.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest
from locations import REPO

ROOT = REPO
PACKAGES = ("ledger", "runner", "analysis", "verify")
ALLOWED = {
    "ledger": set(),
    "runner": {"ledger"},
    "analysis": {"ledger", "runner", "verify"},
    "verify": set(),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {
        _module_name(path): path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (a submodule, else its package), or None."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports, from the AST of every file (read once a run;
    the tests only read the graph)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges: set[str] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                # `from pkg import sub` imports the submodule pkg.sub when there is one
                targets = [
                    f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                    for alias in node.names
                ]
            for target in targets:
                resolved = _resolve(target, modules)
                if resolved is not None and resolved != name:
                    edges.add(resolved)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_sees_every_module_and_real_edges() -> None:
    graph = import_graph()
    assert {"ledger.cli", "runner.cli", "analysis.cli", "verify.cli"} <= set(graph)
    # a deferred import inside a function counts: the demo imports the runner inside run_demo
    assert "runner.execute" in graph["analysis.demo"]
    assert "ledger._store" in graph["ledger"]


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_run_one_way(package: str) -> None:
    graph = import_graph()
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.partition(".")[0] == package
        for target in targets
        if (other := target.partition(".")[0]) != package and other not in ALLOWED[package]
    )
    assert wrong == [], f"{package} may import only {sorted(ALLOWED[package])}: {wrong}"


def test_no_import_cycle_anywhere() -> None:
    assert cycles(import_graph()) == []


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
