"""The verifier's parser and step-kind registries (``verify/_parsers/``, ``verify/_step_kinds/``).

Their keys must be ``tests/vectors/vocabulary.json`` "parsers" and "step_kinds", in order (the
writer's registries are held to the same lists, never to this code), one module per kind, and
re-parsing and re-scoring must go through the entries.
"""

from __future__ import annotations

import json
import pkgutil
from types import ModuleType

import pytest
from locations import REPO

from verify import _parsers, _step_kinds
from verify import _rescore as rs

VOCABULARY = json.loads((REPO / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))


def _modules(package: ModuleType) -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(package.__path__) if m.name[0] != "_")


def test_the_parser_registry_is_the_vocabulary_s_parsers_in_order() -> None:
    assert list(_parsers.REGISTRY) == VOCABULARY["parsers"]
    assert _modules(_parsers) == sorted(n.replace("-", "_") for n in _parsers.REGISTRY)
    assert _parsers.VOCABULARY_PARSERS == ("multiple-choice", "yes-no-maybe", "orientation-word")


def test_the_step_kind_registry_is_the_vocabulary_s_step_kinds_in_order() -> None:
    assert list(_step_kinds.REGISTRY) == VOCABULARY["step_kinds"]
    assert _modules(_step_kinds) == sorted(_step_kinds.REGISTRY)
    assert [n for n, k in _step_kinds.REGISTRY.items() if k.schema] == ["json"]


@pytest.mark.parametrize(
    ("parser", "answer", "truth", "correct"),
    [
        ("exact", "Aspirin", "aspirin", 0),
        ("exact", "Aspirin", "Aspirin", 1),
        ("normalized", "Heart-failure!", "heart failure", 1),
        ("multiple-choice", "b", "B ", 1),
    ],
)
def test_each_parser_compares_its_way(parser: str, answer: str, truth: str, correct: int) -> None:
    scored = _parsers.score(_parsers.parse_text(answer, parser), parser, truth)
    assert scored.n_correct == correct


def test_only_cloze_items_carry_log_probabilities() -> None:
    parsed = rs.Parsed("ok", answers=((1, ("B",)),), cloze={"logprobs": {"B": -0.1}, "margin": 1.0})
    cloze = json.loads(_parsers.score(parsed, "cloze", "B").items)
    assert cloze[0]["logprobs"] == {"B": -0.1} and cloze[0]["margin"] == 1.0
    plain = json.loads(_parsers.score(parsed, "multiple-choice", "B").items)
    assert "logprobs" not in plain[0]


@pytest.mark.parametrize(
    ("kind", "labels", "text", "want"),
    [
        ("text", (), " a ", "a"),
        ("label", ("yes", "no"), "Yes.", "yes"),
        ("label", ("yes", "no"), "yes and no", None),
        ("json", (), '{"a": "x"}', {"a": "x"}),
        ("json", (), '{"a": 2}', None),
    ],
)
def test_each_step_kind_reparses_as_the_docs_say(
    kind: str, labels: tuple[str, ...], text: str, want: object
) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert _step_kinds.REGISTRY[kind].parse(text, labels, schema) == want
