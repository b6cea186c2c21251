"""The verifier's statistic registry (verify/_statistics/): one module per vocabulary test kind."""

from __future__ import annotations

import ast
import json

from locations import REPO

from verify import _statistics
from verify._recompute import posthoc

ROOT = REPO
VOCABULARY = json.loads((ROOT / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))


def test_the_registry_holds_the_vocabulary_tests_in_their_order() -> None:
    assert list(_statistics.REGISTRY) == VOCABULARY["tests"]
    assert list(_statistics.TESTS) == VOCABULARY["tests"]
    assert [s.order for s in _statistics.REGISTRY.values()] == sorted(
        s.order for s in _statistics.REGISTRY.values()
    )


def test_one_module_per_kind_named_after_it() -> None:
    modules = sorted(
        p.stem for p in (ROOT / "verify" / "_statistics").glob("*.py") if not p.stem.startswith("_")
    )
    assert modules == sorted(t.replace("-", "_") for t in VOCABULARY["tests"])


def test_the_posthoc_kinds_are_the_vocabularys() -> None:
    assert list(posthoc.POSTHOC_TESTS) == VOCABULARY["posthoc_tests"]


def test_unknown_kinds_are_none_and_fall_back_to_the_contrast_cell() -> None:
    assert _statistics.get("no-such-test") is None
    assert _statistics.get(["lmm"]) is None
    values = {"estimate": 0.1, "lower": 0.02, "upper": 0.18, "conf": 0.95}
    assert _statistics.estimate_text("no-such-test", values) == _statistics.estimate_text(
        "paired-t", values
    )
    assert _statistics.estimate_text("paired-t", values) == "+10.0 pp (95% CI +2.0 pp to +18.0 pp)"


def test_the_dispatching_modules_name_no_test() -> None:
    """The science and report checks ask the registry: no ``test == "<kind>"`` comparisons."""
    kinds = set(VOCABULARY["tests"])
    files = [
        ROOT / "verify" / "_science.py",
        ROOT / "verify" / "_archive" / "report.py",
        ROOT / "verify" / "_mcqhyp.py",
        *sorted((ROOT / "verify" / "_recompute").glob("*.py")),
    ]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Compare):
                named = [
                    c.value
                    for c in [node.left, *node.comparators]
                    if isinstance(c, ast.Constant) and c.value in kinds
                ]
                assert not named, f"{path.name}:{node.lineno} compares with {named}"
