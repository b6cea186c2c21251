"""The writer's parser and step-kind registries (``runner/parsers/``, ``runner/step_kinds/``).

Each response parser is one module of ``runner/parsers/`` defining a ``SPEC``, each step kind one
module of ``runner/step_kinds/`` defining a ``KIND``; :mod:`pkgutil` finds them. Their keys must be
``tests/vectors/vocabulary.json`` "parsers" and "step_kinds" (the lists the verifier is held to as
well), in that order, and the spec must ask the registries rather than name a parser.
"""

from __future__ import annotations

import ast
import json
import pkgutil
from types import ModuleType

import pytest
from locations import REPO

import runner.parsers
import runner.spec
import runner.step_kinds
import runner.steps._core
from runner.parsers import REGISTRY, ParserSpec
from runner.step_kinds import StepKind

VOCABULARY = json.loads((REPO / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))


def _modules(package: ModuleType) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name[0] != "_")


def test_the_parser_registry_is_the_vocabulary_s_parsers_in_order() -> None:
    assert list(REGISTRY) == VOCABULARY["parsers"]
    assert list(runner.spec.PARSERS) == VOCABULARY["parsers"]


def test_each_parser_is_one_module_named_after_it() -> None:
    assert _modules(runner.parsers) == sorted(n.replace("-", "_") for n in REGISTRY)
    for name, spec in REGISTRY.items():
        assert isinstance(spec, ParserSpec) and spec.name == name
    orders = [spec.order for spec in REGISTRY.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)


def test_the_parser_groups_are_the_ones_the_spec_documents() -> None:
    """docs/scoring.md: which parsers take letters, a mode, an answer column."""
    assert runner.spec.VOCABULARY_PARSERS == (
        "multiple-choice",
        "yes-no-maybe",
        "orientation-word",
    )
    assert runner.spec.TEXT_PARSERS == ("exact", "normalized")
    assert runner.spec.LETTER_PARSERS == ("multiple-choice", "cloze")
    assert (
        *runner.spec.VOCABULARY_PARSERS,
        *runner.spec.TEXT_PARSERS,
        "cloze",
    ) == runner.spec.SINGLE_ANSWER_PARSERS
    columns = {name: runner.spec.default_answer_column(name) for name in REGISTRY}
    assert {n for n, c in columns.items() if c != "answer"} == {"orientation-word"}


def test_only_the_whole_text_parsers_refuse_truth_answers_they_can_never_match() -> None:
    """An answer an ``exact`` or ``normalized`` parser can never equal is the entry's to say."""
    refusing = {n for n, s in REGISTRY.items() if s.answer_problem is not None}
    assert refusing == set(runner.spec.TEXT_PARSERS)
    exact, normalized = REGISTRY["exact"].answer_problem, REGISTRY["normalized"].answer_problem
    assert exact is not None and normalized is not None
    assert exact(" aspirin") is not None and exact("aspirin") is None
    assert normalized("*-!* ") is not None and normalized("a-b") is None


def test_the_step_kind_registry_is_the_vocabulary_s_step_kinds_in_order() -> None:
    assert list(runner.step_kinds.REGISTRY) == VOCABULARY["step_kinds"]
    assert tuple(VOCABULARY["step_kinds"]) == runner.steps._core.STEP_PARSERS
    assert _modules(runner.step_kinds) == sorted(runner.step_kinds.REGISTRY)
    for name, kind in runner.step_kinds.REGISTRY.items():
        assert isinstance(kind, StepKind) and kind.name == name
        assert (kind.key is None) == (kind.read is None), name


@pytest.mark.parametrize(
    ("parser", "labels", "text", "want"),
    [
        ("text", (), "  a reply \n", "a reply"),
        ("text", (), " \n ", None),
        ("label", ("correct", "incorrect"), "It is Correct.", "correct"),
        ("label", ("correct", "incorrect"), "correct or incorrect", None),
        ("json", (), '```json\n{"a": "x"}\n```', {"a": "x"}),
        ("json", (), '{"a": 1}', None),
    ],
)
def test_each_step_kind_parses_as_the_docs_say(
    parser: str, labels: tuple[str, ...], text: str, want: object
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    kind = runner.step_kinds.REGISTRY[parser]
    assert kind.parse(text, labels, schema) == want


def _compared(source: str, names: set[str]) -> list[int]:
    """Lines of ``source`` comparing a value with a string of ``names`` (or a tuple of them)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        constants = [o for o in operands if isinstance(o, ast.Constant)]
        constants += [e for o in operands if isinstance(o, ast.Tuple) for e in o.elts]
        if {c.value for c in constants if isinstance(c, ast.Constant)} & names:
            found.append(node.lineno)
    return found


def test_the_response_section_and_step_dispatch_name_no_kind() -> None:
    """``[response]`` asks :mod:`runner.parsers`; step parsing asks :mod:`runner.step_kinds`."""
    response = (REPO / "runner" / "spec" / "_response.py").read_text("utf-8")
    assert _compared(response, set(VOCABULARY["parsers"])) == []
    source = (REPO / "runner" / "steps" / "_core.py").read_text("utf-8")
    functions = {
        n.name: ast.get_source_segment(source, n) or ""
        for n in ast.walk(ast.parse(source))
        if isinstance(n, ast.FunctionDef)
    }
    for name in ("parse_output", "_parse_step", "_kind_parts"):
        assert functions[name], name
        assert _compared(functions[name], set(VOCABULARY["step_kinds"])) == [], name
