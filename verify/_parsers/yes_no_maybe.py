"""``yes-no-maybe`` (section 5): one of yes, no, maybe, with the study's mode."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import _YNM, Parsed, _run_single


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return _run_single(_YNM, text, mode)


def _default(text: str) -> Parsed:
    return _run_single(_YNM, text)


PARSER = Parser("yes-no-maybe", 3, _parse, _default, vocabulary=True)
