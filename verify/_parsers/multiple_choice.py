"""``multiple-choice`` (section 5): one option letter, with the study's letters and mode."""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import _MC, Parsed, _letters, _run_single


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return _run_single(_letters(letters), text, mode)


def _default(text: str) -> Parsed:
    return _run_single(_MC["ABCD"], text)


PARSER = Parser("multiple-choice", 2, _parse, _default, vocabulary=True)
