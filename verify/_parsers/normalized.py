"""``normalized`` (section 5.3): the normalized text is the answer, compared with the truth's."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import Parsed, _normalized, normalized


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return _normalized(text)


def _correct(value: str, truth: str) -> bool:
    return value == normalized(truth)


PARSER = Parser("normalized", 6, _parse, _normalized, correct=_correct)
