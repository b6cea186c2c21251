"""``orientation-word`` (section 5): one of UP, RIGHT, DOWN, LEFT, with the study's mode."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import _OW, Parsed, _run_single


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return _run_single(_OW, text, mode)


def _default(text: str) -> Parsed:
    return _run_single(_OW, text)


PARSER = Parser("orientation-word", 4, _parse, _default, vocabulary=True)
