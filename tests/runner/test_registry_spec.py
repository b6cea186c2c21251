"""The spec side's statistic registry (``runner/statistics/``) against the one vocabulary.

Each statistic kind is one module of ``runner/statistics/`` defining a ``SPEC``; the registry
finds them by :mod:`pkgutil`. Its keys must be ``tests/vectors/vocabulary.json`` "tests" (the
list the verifier is held to as well), in that order, and ``runner.spec`` must validate a
hypothesis by asking the registry, never by comparing a test name.
"""

from __future__ import annotations

import ast
import json
import pkgutil
from pathlib import Path

import pytest
from locations import REPO

import runner.spec
import runner.statistics
from runner.spec import SpecError
from runner.statistics import REGISTRY, TESTS, StatisticSpec, taking

ROOT = REPO
VOCABULARY = json.loads((ROOT / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))


def test_the_registry_is_the_vocabulary_s_tests_in_order() -> None:
    assert list(REGISTRY) == VOCABULARY["tests"]
    assert list(TESTS) == VOCABULARY["tests"]
    assert runner.spec.TESTS == TESTS  # the name other modules and tests import
    mcq = ["flip-rate", "position-bias", "voting", "self-consistency", "gee"]
    assert list(runner.spec.MCQ_TESTS) == mcq  # docs/mcq-statistics.md §11


def test_each_kind_is_one_module_named_after_it() -> None:
    modules = [
        m.name
        for m in pkgutil.iter_modules(runner.statistics.__path__)
        if not m.name.startswith("_")
    ]
    assert sorted(modules) == sorted(name.replace("-", "_") for name in REGISTRY)
    for name, spec in REGISTRY.items():
        assert isinstance(spec, StatisticSpec)
        assert spec.name == name
    orders = [spec.order for spec in REGISTRY.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_keys_a_kind_takes_name_the_kinds_in_their_message_order() -> None:
    # the refusal "does not apply to test 'lmm' (only to ...)" lists the item-file kinds first
    assert taking("arm") == ["flip-rate", "voting", "self-consistency", "mcnemar", "qr-bootstrap"]
    assert taking("variant") == ["position-bias", "self-consistency", "gee", "mcnemar"]
    assert taking("pairing") == ["paired-t"]
    assert taking("effect") == ["factorial"]
    assert taking("no-such-key") == []


def _compares_a_test_name(node: ast.Compare) -> bool:
    """``test == "gee"``, ``h.test in ("voting", ...)`` and the like."""
    operands = [node.left, *node.comparators]
    named = any(
        (isinstance(o, ast.Name) and o.id == "test")
        or (isinstance(o, ast.Attribute) and o.attr == "test")
        for o in operands
    )
    literals = [
        c.value
        for o in operands
        for c in ([o] if isinstance(o, ast.Constant) else getattr(o, "elts", []))
        if isinstance(c, ast.Constant)
    ]
    return named and any(value in REGISTRY for value in literals)


def test_the_spec_package_names_no_test() -> None:
    found = []
    for path in sorted((ROOT / "runner" / "spec").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += [
            f"{path.name}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Compare) and _compares_a_test_name(node)
        ]
    assert found == []


def test_the_guard_sees_a_test_name_compared() -> None:
    compare = ast.parse('h.test in ("voting", "gee")').body[0]
    assert isinstance(compare, ast.Expr) and isinstance(compare.value, ast.Compare)
    assert _compares_a_test_name(compare.value)
    other = ast.parse('role == "factorial"').body[0]
    assert isinstance(other, ast.Expr) and isinstance(other.value, ast.Compare)
    assert not _compares_a_test_name(other.value)


@pytest.mark.parametrize("kind", list(REGISTRY))
def test_every_registered_kind_is_known_to_load_study(kind: str, tmp_path: Path) -> None:
    """A hypothesis of each kind is never refused as an unknown test."""
    (tmp_path / "study.toml").write_text(
        f'[study]\nid = "s"\n\n[[hypotheses]]\nid = "H1"\ntest = "{kind}"\n', encoding="utf-8"
    )
    with pytest.raises(SpecError) as caught:
        runner.spec.load_study(tmp_path, strict=False)
    problems = "\n".join(caught.value.problems)
    assert "hypotheses[0].test: unknown test" not in problems
    assert "[[hypotheses]]" not in problems  # the table was read
    (tmp_path / "study.toml").write_text(
        '[study]\nid = "s"\n\n[[hypotheses]]\nid = "H1"\ntest = "no-such-test"\n',
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as unknown:
        runner.spec.load_study(tmp_path, strict=False)
    expected = f"hypotheses[0].test: unknown test 'no-such-test'; use one of {', '.join(TESTS)}"
    assert any(p.endswith(expected) for p in unknown.value.problems)
