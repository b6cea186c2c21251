"""verify/ is an independent implementation: it must not import the writer or its neighbours."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from locations import REPO

import verify

VERIFY_DIR = REPO / "verify"
FORBIDDEN = ("ledger", "runner", "analysis")


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative imports stay inside verify/
                continue
            found.append((node.lineno, node.module or ""))
        elif isinstance(node, ast.Call) and getattr(
            node.func, "attr", getattr(node.func, "id", "")
        ) in (
            "import_module",
            "__import__",
        ):
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    found.append((node.lineno, arg.value))
    return found


def _sources() -> list[Path]:
    return sorted(VERIFY_DIR.rglob("*.py"))


def test_verify_sources_exist() -> None:
    assert (VERIFY_DIR / "__init__.py").is_file()
    assert len(_sources()) >= 5


@pytest.mark.parametrize("path", _sources(), ids=lambda p: p.name)
def test_no_import_of_ledger_runner_or_analysis(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for lineno, module in _imports(tree):
        top = module.split(".")[0]
        assert top not in FORBIDDEN, f"{path.name}:{lineno} imports {module}"


def test_the_import_checker_catches_forbidden_imports() -> None:
    for source in (
        "import ledger",
        "import ledger.store as s",
        "from ledger import x",
        "from runner._backends import y",
        "import analysis._stats",
        "importlib.import_module('ledger')",
        "__import__('runner')",
    ):
        tops = [m.split(".")[0] for _, m in _imports(ast.parse(source))]
        assert any(t in FORBIDDEN for t in tops), source


def test_public_api_is_pinned() -> None:
    assert set(verify.__all__) >= {
        "Status",
        "Check",
        "Report",
        "VerificationError",
        "verify_ledger_file",
        "require_valid",
        "merkle_root",
        "verify_inclusion",
        "verify_consistency",
        "inclusion_proof",
        "consistency_proof",
        "parse_vkey",
        "open_note",
        "parse_checkpoint",
    }
    for name in verify.__all__:
        assert hasattr(verify, name), name
