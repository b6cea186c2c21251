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
    assert {"ledger.cli", "runner._cli", "analysis._cli", "verify.cli"} <= set(graph)
    # a deferred import inside a function counts: the demo imports the runner inside run_demo
    assert "runner" in graph["analysis._demo"]
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


# --- faces (issue 33): added by make_faces.py ---
# A package's modules are private (``_name.py``, or inside a private package) unless they are a
# face: a package ``__init__`` whose ``__all__`` is what other packages use. Privacy is per
# top-level package: ``runner._lock`` may be imported anywhere in ``runner``, never by
# ``analysis``. A registry's entries (the modules a package discovers with pkgutil, named by the
# vocabulary: ``runner/statistics/paired_t.py``) are public by that contract.
FACES = {
    "ledger",
    "runner",
    "runner.spec",
    "runner.statistics",
    "runner.parsers",
    "runner.step_kinds",
    "runner.steps",
    "runner.simulated",
    "analysis",
    "analysis.statistics",
    "analysis.parsers",
    "analysis.view",
    "analysis.mcq",
    "verify",
}
SHARED_HELPER = "ledger._lazy"  # the PEP 562 helper each face uses to be lazy
LAZY_SUBPACKAGE_FACES = ("runner.steps", "runner.simulated", "analysis.view", "analysis.mcq")


def is_private(module: str) -> bool:
    """Whether a module is private: a part after the package's name starts with ``_``."""
    return any(part.startswith("_") for part in module.split(".")[1:])


def registry_entries() -> set[str]:
    """The modules of the packages that discover their modules by name (pkgutil)."""
    modules = _modules()
    found: set[str] = set()
    for name, path in modules.items():
        if path.name == "__init__.py" and "pkgutil.iter_modules" in path.read_text("utf-8"):
            found.update(m for m in modules if m.rpartition(".")[0] == name)
    return found


def private_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Every import of another top-level package's private module."""
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if target.partition(".")[0] != module.partition(".")[0]
        and is_private(target)
        and target != SHARED_HELPER
    )


def test_no_package_imports_another_packages_private_module() -> None:
    assert private_crossings(import_graph()) == []


def test_private_crossings_are_found() -> None:
    graph = {
        "analysis._report": {"runner._lock", "runner", "runner.steps", "analysis._stats"},
        "runner._execute": {"ledger._workers", "ledger._lazy", "runner.steps._core"},
    }
    assert private_crossings(graph) == [
        "analysis._report imports runner._lock",
        "runner._execute imports ledger._workers",
    ]
    assert is_private("runner.steps._core") and is_private("runner._lock")
    assert not is_private("runner.steps") and not is_private("runner")


def test_every_runner_and_analysis_module_is_private_or_a_face() -> None:
    entries = registry_entries()
    assert "runner.statistics.paired_t" in entries
    public = sorted(
        name
        for name in _modules()
        if name.partition(".")[0] in ("runner", "analysis")
        and not is_private(name)
        and name not in FACES
        and name not in entries
    )
    assert public == [], f"make these private (_name.py) or list them as faces: {public}"


def test_the_subpackage_faces_are_lazy_and_resolve() -> None:
    import importlib
    import json
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        f"for face in {LAZY_SUBPACKAGE_FACES!r}: __import__(face)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('runner', 'analysis')))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(result.stdout) == sorted(
        {"runner", "analysis", *LAZY_SUBPACKAGE_FACES}
    )  # importing a face loads none of its modules
    for face in LAZY_SUBPACKAGE_FACES:
        module = importlib.import_module(face)
        assert module.__all__, face
        assert dir(module) == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is not None, f"{face}.{name}"
