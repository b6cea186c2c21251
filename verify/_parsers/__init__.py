"""The verifier's own parser registry: one module per parser kind (``docs/scoring.md``).

Each module (``multiple_choice.py`` for ``multiple-choice``, ...) defines a module-level
``PARSER`` (:class:`~verify._parsers._base.Parser`). They are found here by :mod:`pkgutil`
(every module whose name does not start with ``_``) into :data:`REGISTRY`, ordered by each
``PARSER.order``: the vocabulary of ``tests/vectors/vocabulary.json`` "parsers", which the
writer's registries are held to as well. :func:`parse_text`, :func:`parse_body` and
:func:`score` ask the registry; they never name a parser. Written from the docs: nothing here
imports ``analysis/`` or ``runner/``.
"""

from __future__ import annotations

import hashlib
import importlib
import pkgutil
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final

import rfc8785

from verify._parsers._base import Parser, same_word
from verify._rescore import (
    CONTROL_TRUTH,
    UNPARSEABLE,
    BodyError,
    Glyph,
    Parsed,
    Scored,
    Truth,
    _item,
    batch_message,
    item_bytes,
    response_text,
)

__all__ = [
    "PARSERS",
    "REGISTRY",
    "VOCABULARY_PARSERS",
    "Parser",
    "parse_body",
    "parse_text",
    "score",
    "score_body",
]


def _discover() -> dict[str, Parser]:
    """Every kind module's ``PARSER``, by name, in ``order`` (each name and order once)."""
    found: list[Parser] = []
    for info in pkgutil.iter_modules(__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        parser = getattr(module, "PARSER", None)
        if not isinstance(parser, Parser):
            raise TypeError(f"{module.__name__} defines no PARSER")
        found.append(parser)
    found.sort(key=lambda p: p.order)
    for kind in ("name", "order"):
        values = [getattr(p, kind) for p in found]
        if len(set(values)) != len(values):
            raise ValueError(f"two parser kinds share a {kind}: {values}")
    return {p.name: p for p in found}


REGISTRY: Final[Mapping[str, Parser]] = MappingProxyType(_discover())
"""Every parser kind by name, in the vocabulary's order."""
PARSERS: Final[dict[str, Callable[[str], Parsed]]] = {
    name: parser.default for name, parser in REGISTRY.items()
}
"""Every parser with its defaults (letters ``ABCD``, mode ``exactly-one``)."""
VOCABULARY_PARSERS: Final = tuple(n for n, p in REGISTRY.items() if p.vocabulary)
"""The parsers with a closed vocabulary, which take a mode (section 5.2)."""


def parse_text(text: str, parser: str, letters: str = "ABCD", mode: str = "exactly-one") -> Parsed:
    """Parse ``text`` with the named parser, letters and mode (KeyError for an unknown parser).

    A mode other than ``exactly-one`` for a parser without a vocabulary is a ValueError.
    """
    entry = REGISTRY[parser]
    if entry.vocabulary:
        return entry.parse(text, letters, mode)
    if mode != "exactly-one":
        raise ValueError(f"parser {parser!r} has no mode {mode!r}")
    return entry.default(text)


def parse_body(
    raw: bytes, fmt: str, parser: str, letters: str = "ABCD", mode: str = "exactly-one"
) -> Parsed:
    """Sections 2-5: take the text of a stored body and parse it."""
    entry = REGISTRY[parser]
    if fmt == "anthropic-batch-result":
        raw, fmt = batch_message(raw), "anthropic-messages"
    if entry.read_body is not None:
        return entry.read_body(raw, fmt, letters)
    try:
        text = response_text(raw, fmt)
    except BodyError:
        return UNPARSEABLE
    return parse_text(text, parser, letters, mode)


def _grid_items(parsed: Parsed, truth: tuple[Glyph, ...]) -> tuple[str, list[dict[str, Any]]]:
    """Section 6.1: one item per glyph; an ``ok`` parse whose rows miss the chart is partial."""
    status = parsed.status
    answers = dict(parsed.answers) if status in ("ok", "partial") else {}
    glyphs = sorted(truth, key=lambda g: (g.row, g.position))
    items = []
    for g in glyphs:
        values = answers.get(g.row, ())
        answer = values[g.position - 1] if 1 <= g.position <= len(values) else None
        items.append(_item(g.row, g.position, g.orientation, answer, answer == g.orientation))
    if status == "ok":
        chart: dict[int, set[int]] = {}
        for g in glyphs:
            chart.setdefault(g.row, set()).add(g.position)
        for row in set(chart) | set(answers):
            if set(range(1, len(answers.get(row, ())) + 1)) != chart.get(row, set()):
                status = "partial"
                break
    return status, items


def _control_items(parsed: Parsed, truth: str) -> list[dict[str, Any]]:
    """Section 6.2: the Snellen control's one item (a refusal is the correct answer)."""
    answer = {"refused": CONTROL_TRUTH, "ok": "orientations", "partial": "orientations"}.get(
        parsed.status
    )
    return [_item(None, None, truth, answer, answer == CONTROL_TRUTH)]


def _single_items(
    parsed: Parsed, parser: str, entry: Parser | None, truth: Truth
) -> list[dict[str, Any]]:
    """Sections 6.3-6.4: one item, compared the parser's way (with log-probabilities)."""
    if not isinstance(truth, str):
        raise ValueError(f"parser {parser!r} needs a single truth answer")
    status = parsed.status
    value = parsed.answers[0][1][0] if status == "ok" and parsed.answers else None
    correct_of = entry.correct if entry is not None else same_word
    correct = False if value is None else correct_of(value, truth)
    items = [_item(None, None, truth, value, correct)]
    if entry is not None and entry.logprobs:  # section 6.4: the logprobs and the margin
        cloze = parsed.cloze or {"logprobs": {}, "margin": None}
        items[0]["logprobs"] = dict(cloze["logprobs"])
        items[0]["margin"] = cloze["margin"]
    return items


def score(parsed: Parsed, parser: str, truth: Truth) -> Scored:
    """Section 6: items, status and counts of one parse against its truth."""
    entry = REGISTRY.get(parser)
    status = parsed.status
    items: list[dict[str, Any]]
    if entry is not None and entry.grid and not isinstance(truth, str):
        status, items = _grid_items(parsed, truth)
    elif entry is not None and entry.grid and isinstance(truth, str):
        items = _control_items(parsed, truth)
    else:
        items = _single_items(parsed, parser, entry, truth)
    logprobs = entry is not None and entry.logprobs
    data = item_bytes(items) if not logprobs else bytes(rfc8785.dumps(items))
    return Scored(
        status,
        len(items),
        sum(1 for i in items if i["answered"]),
        sum(1 for i in items if i["correct"]),
        data,
        hashlib.sha256(data).hexdigest(),
    )


def score_body(
    raw: bytes,
    fmt: str,
    parser: str,
    truth: Truth,
    letters: str = "ABCD",
    mode: str = "exactly-one",
) -> Scored:
    """Parse and score one stored response body."""
    return score(parse_body(raw, fmt, parser, letters, mode), parser, truth)
