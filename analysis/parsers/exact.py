"""``exact``: the whole response, stripped of whitespace, is the answer (scoring.md §5.3).

A free-text answer: no closed answer set.
"""

from __future__ import annotations

from analysis.parsers._base import ResponseParser
from analysis.parsers._core import _SPACE, Parsed, _single, _unparseable

__all__ = ["PARSER", "parse_exact"]


def parse_exact(text: str) -> Parsed:
    """The whole response text, stripped of whitespace at both ends, is the answer.

    An empty text (after stripping) is ``"unparseable"``; nothing else is changed (no case
    folding, no markup removal): the scorer compares it with the truth code point by code point.
    """
    answer = text.strip(_SPACE)
    return _single(answer) if answer else _unparseable("empty response")


def _configured(text: str, letters: str, mode: str) -> Parsed:
    return parse_exact(text)


PARSER = ResponseParser("exact", 5, _configured, parse_exact)
