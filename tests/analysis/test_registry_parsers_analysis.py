"""The analysis side's parser registry (``analysis/parsers/``) against the one vocabulary.

Each response parser is one module of ``analysis/parsers/`` defining a ``PARSER`` whose function
lives in that module; the registry's keys must be ``tests/vectors/vocabulary.json`` "parsers"
in order, :data:`analysis._parse.PARSERS` and :class:`~analysis._parse.ParserConfig` must
dispatch through it, and the analysis's closed answer sets are the entries'.
"""

from __future__ import annotations

import json
import pkgutil

import pytest
from locations import REPO

import analysis.parsers
from analysis import _analyze as analyze
from analysis._parse import PARSERS, ParserConfig, parse_response
from analysis.parsers import REGISTRY, ResponseParser

VOCABULARY = json.loads((REPO / "tests" / "vectors" / "vocabulary.json").read_text("utf-8"))


def test_the_registry_is_the_vocabulary_s_parsers_in_order() -> None:
    assert list(REGISTRY) == VOCABULARY["parsers"]
    assert list(PARSERS) == VOCABULARY["parsers"]


def test_each_parser_is_one_module_owning_its_function() -> None:
    modules = [m.name for m in pkgutil.iter_modules(analysis.parsers.__path__)]
    assert sorted(m for m in modules if not m.startswith("_")) == sorted(
        name.replace("-", "_") for name in REGISTRY
    )
    for name, entry in REGISTRY.items():
        assert isinstance(entry, ResponseParser) and entry.name == name
        module = f"analysis.parsers.{name.replace('-', '_')}"
        assert entry.default.__module__ == module, name
        assert PARSERS[name] is entry.default


@pytest.mark.parametrize(
    ("parser", "letters", "mode", "text", "answer"),
    [
        ("multiple-choice", "ABCDE", "exactly-one", "Answer: E", "E"),
        ("multiple-choice", "ABCD", "first-token", "B, then maybe C", "B"),
        ("yes-no-maybe", "ABCD", "first-token", "No, yes.", "no"),
        ("orientation-word", "ABCD", "exactly-one", "the top points LEFT", "LEFT"),
        ("exact", "ABCD", "exactly-one", "  Aspirin \n", "Aspirin"),
        ("normalized", "ABCD", "exactly-one", "**Heart-failure!**", "heart failure"),
    ],
)
def test_a_config_reads_through_its_entry(
    parser: str, letters: str, mode: str, text: str, answer: str
) -> None:
    assert ParserConfig(parser, letters, mode).parse(text).answer == answer


def test_settings_a_parser_does_not_take_are_refused_with_today_s_messages() -> None:
    with pytest.raises(KeyError, match="unknown parser 'nope'"):
        ParserConfig("nope").check()
    with pytest.raises(ValueError, match="has only the mode exactly-one"):
        ParserConfig("exact", mode="first-token").parse("x")
    with pytest.raises(ValueError, match="mode must be one of"):
        ParserConfig("yes-no-maybe", mode="last").parse("yes")


def test_cloze_reads_the_body_through_its_entry() -> None:
    assert REGISTRY["cloze"].read_body is not None
    body = {"choices": [{"logprobs": {"content": [{"token": "B", "logprob": -0.1}]}}]}
    parsed = parse_response(json.dumps(body).encode(), "openai-chat", ParserConfig("cloze"))
    assert parsed.status == "unparseable"  # A, C and D have no log-probability
    assert parsed.logprobs == (("A", None), ("B", -0.1), ("C", None), ("D", None))


def test_the_analysis_labels_are_the_entries_answer_sets() -> None:
    def plan(parser: str, letters: str | None = None) -> dict[str, object]:
        return {"response": {"parser": parser, "letters": letters}}

    assert analyze.labels(plan("tumbling-e-json")) == ("UP", "RIGHT", "DOWN", "LEFT")
    assert analyze.labels(plan("orientation-word")) == ("UP", "RIGHT", "DOWN", "LEFT")
    assert analyze.labels(plan("yes-no-maybe")) == ("yes", "no", "maybe")
    assert analyze.labels(plan("multiple-choice", "ABCDE")) == tuple("ABCDE")
    assert analyze.labels(plan("cloze")) == tuple("ABCD")
    assert analyze.labels(plan("exact")) is None
    assert analyze.labels(plan("ddx")) is None
