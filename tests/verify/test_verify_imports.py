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


_BEFORE_SCIENCE = """
import json, sys
import verify._archive

seen = []

def science(run):  # the checks before it have run: what did they import?
    seen.append(sorted(m for m in sys.modules if m == "scipy" or m.startswith("scipy.")))
    return []

verify._archive._science = science
report = verify._archive.verify_archive(sys.argv[1])
failed = [(c.name, c.reason) for c in report.checks if c.status.name == "FAIL"]
print(json.dumps({"seen": seen, "failed": failed, "checks": len(report.checks)}))
"""


def test_the_checks_before_the_science_ones_do_not_import_scipy() -> None:
    """scipy (about a second of CPU to import) is imported by the science checks alone, inside
    the functions that use it: a verification that stops before them (a directory that is not
    an archive, a report read without them) does not pay for it (``docs/archive-format.md``
    §4). Run in a fresh interpreter on the golden archive, every other check run in full."""
    import json
    import subprocess
    import sys

    golden = REPO / "archive" / "prompt-tumbling-e"
    proc = subprocess.run(
        [sys.executable, "-c", _BEFORE_SCIENCE, str(golden)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    assert out["failed"] == [] and out["checks"] > 20, out
    assert out["seen"] == [[]], f"imported before the science checks: {out['seen']}"
