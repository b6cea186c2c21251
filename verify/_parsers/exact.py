"""``exact`` (section 5.3): the stripped text is the answer, compared code point by code point."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import Parsed, _exact


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return _exact(text)


def _correct(value: str, truth: str) -> bool:
    return value == truth


PARSER = Parser("exact", 5, _parse, _exact, correct=_correct)
