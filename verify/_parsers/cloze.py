"""``cloze`` (section 5.5): the letter with the highest first-token log-probability.

It reads the stored body (a text alone is unparseable); its item carries the letters'
log-probabilities and the margin (section 6.4).
"""

from __future__ import annotations

from verify._parsers._base import Parser
from verify._rescore import UNPARSEABLE, Parsed, parse_cloze


def _default(text: str) -> Parsed:
    return UNPARSEABLE


def _parse(text: str, letters: str, mode: str) -> Parsed:
    return UNPARSEABLE


PARSER = Parser("cloze", 7, _parse, _default, read_body=parse_cloze, logprobs=True)
