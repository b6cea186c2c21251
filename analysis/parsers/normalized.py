"""``normalized``: the normalized form of the whole response is the answer (scoring.md §5.3).

A free-text answer: no closed answer set.
"""

from __future__ import annotations

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import Parsed, _single, _unparseable, normalize_text

__all__ = ["PARSER", "parse_normalized"]


def parse_normalized(text: str) -> Parsed:
    """The :func:`normalize_text` form of the whole response is the answer (empty: unparseable)."""
    answer = normalize_text(text)
    return _single(answer) if answer else _unparseable("empty response")


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_normalized(text)


PARSER = ResponseParser("normalized", 6, _configured, parse_normalized)
